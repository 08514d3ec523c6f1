//! Typed views over packet bytes and the compact per-packet record.
mod record;
pub use record::{proto, tcp_flags, FlowKey, PacketRecord, TcpInfo};
