//! AF_XDP sources of a live host (`clarion-xdp`, aya), behind the cargo
//! feature `xdp`. Without it the modes still exist, so flags and configs
//! read the same, and attaching refuses, naming the feature.

#[cfg(feature = "xdp")]
pub use clarion_xdp::{XdpMode, XdpProgram};
#[cfg(feature = "xdp")]
pub(crate) use on::{attach_xdp, open_xdp};

#[cfg(not(feature = "xdp"))]
pub use off::XdpMode;
#[cfg(not(feature = "xdp"))]
pub(crate) use off::{attach_xdp, open_xdp, XdpProgram};

#[cfg(feature = "xdp")]
mod on {
    use clarion_live::{Source, XdpSource};
    use clarion_xdp::{XdpConfig, XdpMode, XdpProgram, XdpSocket};

    use crate::{HostError, LiveConfig};

    /// One XDP program per interface.
    pub fn attach_xdp(
        config: &LiveConfig,
        mode: XdpMode,
        workers: u32,
    ) -> Result<Vec<XdpProgram>, HostError> {
        if config.filter.is_some() {
            return Err(HostError::Usage(
                "--filter needs --source packet (AF_XDP takes every frame of its queues)".into(),
            ));
        }
        let mut progs = Vec::new();
        for name in &config.interfaces {
            let prog = XdpProgram::attach(name, mode).map_err(|e| HostError::Setup(e.into()))?;
            if prog.queues() < workers {
                return Err(HostError::Usage(format!(
                    "{name} has {} RX queue(s) and AF_XDP reads each with one worker; use --workers {} or fewer",
                    prog.queues(),
                    prog.queues()
                )));
            }
            progs.push(prog);
        }
        Ok(progs)
    }

    /// Worker `w`'s AF_XDP sockets: the queues q with q mod workers = w of every interface.
    pub fn open_xdp(progs: &[XdpProgram], w: u32, workers: u32) -> Result<Vec<Box<dyn Source>>, HostError> {
        // 16,384 frames (32 MiB) and an RX ring of 8,192 per queue: tens of
        // milliseconds of buffering at a million frames/s, like the AF_PACKET ring.
        let cfg = XdpConfig {
            frames: 1 << 14,
            ring_size: 1 << 13,
            ..XdpConfig::default()
        };
        let mut out: Vec<Box<dyn Source>> = Vec::new();
        for prog in progs {
            for q in (w..prog.queues()).step_by(workers as usize) {
                let sock = XdpSocket::open(prog, q, &cfg).map_err(|e| HostError::Setup(e.into()))?;
                let source = XdpSource::new(sock, cfg.ring_size, prog.interface(), prog.ifindex());
                out.push(Box::new(source));
            }
        }
        Ok(out)
    }
}

#[cfg(not(feature = "xdp"))]
mod off {
    use clarion_live::Source;

    use crate::{HostError, LiveConfig};

    /// Where the XDP program runs (as `clarion_xdp::XdpMode`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum XdpMode {
        Native,
        Generic,
    }

    /// Never made: attaching refuses.
    pub enum XdpProgram {}

    pub fn attach_xdp(_: &LiveConfig, _: XdpMode, _: u32) -> Result<Vec<XdpProgram>, HostError> {
        Err(HostError::Usage(
            "--source xdp: this clarion was built without AF_XDP (cargo feature `xdp`); \
             build it with `--features xdp`, or the default features, or use --source packet"
                .into(),
        ))
    }

    pub fn open_xdp(_: &[XdpProgram], _: u32, _: u32) -> Result<Vec<Box<dyn Source>>, HostError> {
        Ok(Vec::new())
    }
}
