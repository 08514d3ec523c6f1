//! The `.gpv` file as a [`Sink<Gpv>`]: the seam every GPV output
//! implements (Parquet in `clarion-parquet`), so the host that builds GPVs
//! never knows which one it holds. The contract is the seam's
//! ([`clarion_sinks::Sink`]): a file is complete only once `finish`
//! returned `Ok`.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use clarion_sinks::{Sink, SinkError};

use crate::{Gpv, GpvError, GpvWriter};

/// A `.gpv` file ([`GpvWriter`] over a buffered file).
pub struct GpvFile {
    writer: Option<GpvWriter<BufWriter<File>>>,
    path: String,
}

impl GpvFile {
    /// Creates (truncates) the file and writes its header; the error names it.
    pub fn create(path: &Path) -> Result<GpvFile, SinkError> {
        let name = path.display().to_string();
        let file = File::create(path).map_err(|e| SinkError::io(&name, e))?;
        let writer = GpvWriter::new(BufWriter::new(file)).map_err(|e| sink_error(&name, e))?;
        Ok(GpvFile {
            writer: Some(writer),
            path: name,
        })
    }

    fn writer(&mut self) -> Result<&mut GpvWriter<BufWriter<File>>, SinkError> {
        self.writer.as_mut().ok_or_else(|| SinkError::Closed {
            destination: self.path.clone(),
        })
    }

    /// Closes the sink on an error, naming the file.
    fn fail(&mut self, e: GpvError) -> SinkError {
        self.writer = None;
        sink_error(&self.path, e)
    }

    /// GPVs written so far.
    pub fn written(&self) -> u64 {
        self.writer.as_ref().map_or(0, GpvWriter::written)
    }
}

/// The seam's name for a codec's error writing to `destination`.
fn sink_error(destination: &str, e: GpvError) -> SinkError {
    match e {
        GpvError::Io(source) => SinkError::io(destination, source),
        other => SinkError::Encode {
            destination: destination.to_string(),
            message: other.to_string(),
        },
    }
}

impl Sink<Gpv> for GpvFile {
    fn write(&mut self, gpv: &Gpv) -> Result<(), SinkError> {
        let r = self.writer()?.write(gpv);
        r.map_err(|e| self.fail(e))
    }

    fn flush(&mut self) -> Result<(), SinkError> {
        let w = self.writer()?;
        let r = w.get_mut().flush().map_err(GpvError::Io);
        r.map_err(|e| self.fail(e))
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        let w = self.writer.take().ok_or_else(|| SinkError::Closed {
            destination: self.path.clone(),
        })?;
        let r = w
            .finish()
            .and_then(|b| b.into_inner().map_err(|e| GpvError::Io(e.into_error())))
            .and_then(|f| f.sync_all().map_err(GpvError::Io));
        r.map_err(|e| self.fail(e))
    }

    fn destination(&self) -> &str {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EvictCause, GpvHeader, GpvReader, PacketFeatures};
    use clarion_wire::FlowKey;

    fn gpv(n: u32) -> Gpv {
        Gpv {
            header: GpvHeader {
                key: FlowKey::default(),
                interface: 0,
                start_ns: 1_000,
                packet_count: n,
                cause: EvictCause::Flush,
            },
            packets: (0..n)
                .map(|i| PacketFeatures {
                    delta: i * 10,
                    size: 60,
                    tcp_flags: 0,
                    tcp: None,
                })
                .collect(),
        }
    }

    #[test]
    fn a_gpv_file_reads_back_and_closes_after_finish() {
        let dir = std::env::temp_dir().join(format!("clarion-gpv-sink-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.gpv");
        let mut f = GpvFile::create(&path).unwrap();
        f.write(&gpv(3)).unwrap();
        f.write(&gpv(1)).unwrap();
        f.flush().unwrap();
        assert_eq!(f.written(), 2);
        f.finish().unwrap();
        assert!(matches!(f.write(&gpv(1)), Err(SinkError::Closed { .. })));
        let back: Vec<Gpv> = GpvReader::new(std::io::BufReader::new(File::open(&path).unwrap()))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(back, vec![gpv(3), gpv(1)]);
        let e = GpvFile::create(&dir.join("no/such/dir.gpv")).err().unwrap();
        assert!(e.to_string().contains("no/such/dir.gpv"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
