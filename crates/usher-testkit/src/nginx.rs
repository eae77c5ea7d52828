//! The system's real nginx, started on loopback with a temporary prefix, for tests of the
//! configurations under `deploy/nginx`. Runs in the foreground as a single process
//! (`daemon off; master_process off;`), so killing it by PID (on drop) stops all of it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// The nginx binary: `nginx` on `PATH`, else `/usr/sbin/nginx` (Debian's place, often not on a
/// user's `PATH`). `make test` installs it (scripts/validate-deploy.sh) when missing.
pub fn binary() -> anyhow::Result<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    on_path
        .into_iter()
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/local/sbin")])
        .map(|d| d.join("nginx"))
        .find(|p| p.is_file())
        .context("nginx is not installed (scripts/validate-deploy.sh installs it)")
}

/// The text of `deploy/nginx/<name>` in this workspace.
pub fn deploy_config(name: &str) -> anyhow::Result<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/nginx")
        .join(name);
    std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))
}

/// `text` with every `from` replaced by `to`; an error when `from` does not occur, so a test
/// notices when the example it adapts changes under it.
pub fn substitute(text: &str, from: &str, to: &str) -> anyhow::Result<String> {
    anyhow::ensure!(text.contains(from), "{from:?} does not occur in the config");
    Ok(text.replace(from, to))
}

/// A running nginx; killed when dropped.
pub struct Nginx {
    pub addr: SocketAddr,
    child: Child,
    dir: tempfile::TempDir,
}

impl Nginx {
    /// Writes `conf` (which must listen on `addr`) into a temporary prefix, starts nginx with it
    /// and waits until `addr` accepts connections.
    pub async fn start(conf: &str, addr: SocketAddr) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        std::fs::create_dir_all(dir.path().join("logs"))?;
        let conf_path = dir.path().join("nginx.conf");
        std::fs::write(&conf_path, conf)?;
        let stderr = std::fs::File::create(dir.path().join("stderr.log"))?;
        let prefix = format!("{}/", dir.path().display());
        let child = Command::new(binary()?)
            .arg("-p")
            .arg(&prefix)
            .arg("-c")
            .arg(&conf_path)
            .arg("-e")
            .arg(dir.path().join("logs/error.log"))
            .args(["-g", "daemon off; master_process off;"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .context("cannot start nginx")?;
        let mut nginx = Self { addr, child, dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = nginx.child.try_wait()? {
                bail!("nginx exited ({status}): {}", nginx.log());
            }
            if tokio::net::TcpStream::connect(addr).await.is_ok() {
                return Ok(nginx);
            }
            if Instant::now() > deadline {
                bail!(
                    "nginx did not listen on {addr} within 10 s: {}",
                    nginx.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What nginx wrote to its stderr (its error log, with the configs under deploy/nginx).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
