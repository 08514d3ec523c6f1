//! Writing a [`FrameSpec`] out, layer by layer, through the views.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::{tcp_options_len, FrameSpec, IpPair, Transport, DST_MAC, SRC_MAC};
use crate::checksum;
use crate::ethernet;
use crate::ipv6ext::{self, next_header};
use crate::link::LinkType;
use crate::loopback::{self, family};
use crate::tcp::{self, TcpOption};
use crate::{chdlc, icmp, ipv4, ipv6, ppp, sll, sll2, udp, vlan};

impl FrameSpec {
    /// Writes the link header and tags; returns where IP starts.
    pub(super) fn emit_link(&self, buf: &mut [u8]) -> usize {
        let tags = self.tags();
        let first_type = tags.first().map_or(self.ethertype(), |t| t.tpid);
        let mut at = match self.link {
            LinkType::Ethernet => {
                let mut f = ethernet::Frame::new_unchecked(&mut *buf);
                f.set_dst_addr(DST_MAC);
                f.set_src_addr(SRC_MAC);
                f.set_ethertype(first_type);
                ethernet::HEADER_LEN
            }
            LinkType::LinuxSll => {
                let mut p = sll::Packet::new_unchecked(&mut *buf);
                p.set_packet_type(0);
                p.set_ha_type(1);
                p.set_ha_len(6);
                p.set_address([0x02, 0, 0, 0, 0, 0x01, 0, 0]);
                p.set_protocol(first_type);
                sll::HEADER_LEN
            }
            LinkType::LinuxSll2 => {
                let mut p = sll2::Packet::new_unchecked(&mut *buf);
                p.set_protocol(first_type);
                p.set_if_index(1);
                p.set_ha_type(1);
                p.set_ha_len(6);
                p.set_address([0x02, 0, 0, 0, 0, 0x01, 0, 0]);
                sll2::HEADER_LEN
            }
            LinkType::Null | LinkType::Loop => {
                let fam = match self.ip {
                    IpPair::V4 { .. } => family::INET,
                    IpPair::V6 { .. } => family::INET6_BSD,
                };
                let mut p = loopback::Packet::new_unchecked(&mut *buf);
                if self.link == LinkType::Null {
                    p.set_family_little_endian(fam);
                } else {
                    p.set_family_network_order(fam);
                }
                loopback::HEADER_LEN
            }
            LinkType::Ppp => {
                let protocol = match self.ip {
                    IpPair::V4 { .. } => ppp::protocol::IPV4,
                    IpPair::V6 { .. } => ppp::protocol::IPV6,
                };
                buf[..2].copy_from_slice(&[0xff, 0x03]);
                buf[2..4].copy_from_slice(&protocol.to_be_bytes());
                4
            }
            LinkType::CiscoHdlc => {
                let mut p = chdlc::Packet::new_unchecked(&mut *buf);
                p.set_address(chdlc::UNICAST);
                p.set_control(0);
                p.set_protocol(first_type);
                chdlc::HEADER_LEN
            }
            LinkType::RawIp | LinkType::Ipv4 | LinkType::Ipv6 => 0,
        };
        for (i, tag) in tags.iter().enumerate() {
            let next = tags.get(i + 1).map_or(self.ethertype(), |t| t.tpid);
            let mut t = vlan::Tag::new_unchecked(&mut buf[at..]);
            t.set_tci(tag.id & 0x0fff);
            t.set_ethertype(next);
            at += vlan::HEADER_LEN;
        }
        at
    }

    /// Writes the IPv4 header; returns where the transport header starts.
    pub(super) fn emit_ipv4(&self, buf: &mut [u8], src: Ipv4Addr, dst: Ipv4Addr) -> usize {
        let hl = ipv4::HEADER_LEN + self.ipv4_options_len();
        let total = self.ip_len();
        let buf = &mut buf[..total];
        let mut p = ipv4::Packet::new_unchecked(&mut *buf);
        p.set_version_and_header_len(hl as u8);
        p.set_dscp_ecn(0, self.ecn);
        p.set_total_len(total as u16);
        p.set_ident(self.ip_id as u16);
        let frag = self.fragment.unwrap_or_default();
        p.set_frag(self.fragment.is_none(), frag.more, frag.offset);
        p.set_ttl(self.ttl);
        p.set_protocol(self.transport.protocol());
        p.set_src_addr(src);
        p.set_dst_addr(dst);
        let n = self.ipv4_options.len().min(40);
        p.options_mut()[..n].copy_from_slice(&self.ipv4_options[..n]);
        p.fill_checksum();
        hl
    }

    /// Writes the IPv6 header and extension headers; returns where the transport header starts.
    pub(super) fn emit_ipv6(&self, buf: &mut [u8], src: Ipv6Addr, dst: Ipv6Addr) -> usize {
        let total = self.ip_len();
        let buf = &mut buf[..total];
        let first =
            (self.ipv6_ext.first().map(|e| e.kind())).or(self.fragment.map(|_| next_header::FRAGMENT));
        let mut p = ipv6::Packet::new_unchecked(&mut *buf);
        p.set_version_tc_flow(self.ecn & 3, 0);
        p.set_payload_len((total - ipv6::HEADER_LEN) as u16);
        p.set_next_header(first.unwrap_or(self.transport.protocol()));
        p.set_hop_limit(self.ttl);
        p.set_src_addr(src);
        p.set_dst_addr(dst);
        let mut at = ipv6::HEADER_LEN;
        for (i, ext) in self.ipv6_ext.iter().enumerate() {
            let next = match self.ipv6_ext.get(i + 1) {
                Some(e) => e.kind(),
                None if self.fragment.is_some() => next_header::FRAGMENT,
                None => self.transport.protocol(),
            };
            let mut h = ipv6ext::ExtHeader::new_unchecked(&mut buf[at..], false);
            h.set_next_header(next);
            h.set_hdr_ext_len(ext.raw_len());
            at += ext.wire_len();
        }
        if let Some(f) = self.fragment {
            let mut h = ipv6ext::FragHeader::new_unchecked(&mut buf[at..]);
            h.set_next_header(self.transport.protocol());
            h.set_frag(f.offset, f.more);
            h.set_ident(self.ip_id);
            at += ipv6ext::MIN_HEADER_LEN;
        }
        at
    }

    /// Writes the transport header at `l4_at` of the IP packet `ip` and its checksum.
    pub(super) fn emit_transport(&self, ip: &mut [u8], l4_at: usize) {
        let total = self.ip_len();
        let l4 = &mut ip[l4_at..total];
        let pseudo = self.pseudo_header(l4.len());
        match self.transport {
            Transport::Tcp(t) => {
                let mut p = tcp::Packet::new_unchecked(&mut *l4);
                p.set_src_port(t.src_port);
                p.set_dst_port(t.dst_port);
                p.set_seq_number(t.seq);
                p.set_ack_number(t.ack);
                p.set_header_len((tcp::HEADER_LEN + tcp_options_len(&t)) as u8);
                p.set_flags(t.flags);
                p.set_window_len(t.window);
                let mut rest = p.options_mut();
                if let Some(m) = t.mss {
                    rest = TcpOption::MaxSegmentSize(m).emit(rest);
                }
                if let Some(s) = t.wscale {
                    rest = TcpOption::NoOperation.emit(rest);
                    TcpOption::WindowScale(s).emit(rest);
                }
                let c = checksum::finish(checksum::sum(pseudo, l4));
                tcp::Packet::new_unchecked(l4).set_checksum(c);
            }
            Transport::Udp { src_port, dst_port } => {
                let len = l4.len() as u16;
                let mut p = udp::Packet::new_unchecked(&mut *l4);
                p.set_src_port(src_port);
                p.set_dst_port(dst_port);
                p.set_len(len);
                let c = checksum::finish(checksum::sum(pseudo, l4));
                // An all-zero UDP checksum means "none"; the computed zero is sent as ones.
                udp::Packet::new_unchecked(l4).set_checksum(if c == 0 { 0xffff } else { c });
            }
            Transport::Icmp { msg_type, code } | Transport::Icmpv6 { msg_type, code } => {
                let mut p = icmp::Packet::new_unchecked(&mut *l4);
                p.set_msg_type(msg_type);
                p.set_msg_code(code);
                let base = if matches!(self.transport, Transport::Icmpv6 { .. }) {
                    pseudo
                } else {
                    0
                };
                let c = checksum::finish(checksum::sum(base, l4));
                icmp::Packet::new_unchecked(l4).set_checksum(c);
            }
            Transport::Other(_) => {}
        }
    }

    fn pseudo_header(&self, l4_len: usize) -> u32 {
        let p = self.transport.protocol();
        match self.ip {
            IpPair::V4 { src, dst } => {
                checksum::pseudo_header(&src.octets(), &dst.octets(), p, l4_len as u32)
            }
            IpPair::V6 { src, dst } => {
                checksum::pseudo_header(&src.octets(), &dst.octets(), p, l4_len as u32)
            }
        }
    }
}
