//! A throw-away certificate authority for TLS tests, made with the `openssl` command line in a
//! temporary directory: the CA, a server certificate for `127.0.0.1`/`localhost` and a client
//! certificate (for mutual TLS), each with its key, as PEM files.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{ensure, Context};

/// The files of a test CA; removed when dropped.
pub struct TestPki {
    dir: tempfile::TempDir,
}

impl TestPki {
    /// Generates a CA (P-256 keys, valid two days), then a server and a client certificate it
    /// signs.
    pub fn generate() -> anyhow::Result<Self> {
        let pki = Self {
            dir: tempfile::tempdir()?,
        };
        pki.openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=usher test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ])?;
        pki.leaf(
            "server",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
        )?;
        pki.leaf("client", "extendedKeyUsage=clientAuth\n")?;
        Ok(pki)
    }

    /// A key and a certificate signed by the CA: `<name>.key`, `<name>.pem`.
    fn leaf(&self, name: &str, extensions: &str) -> anyhow::Result<()> {
        let (key, csr, pem, ext) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
            format!("{name}.ext"),
        );
        std::fs::write(self.dir.path().join(&ext), extensions)?;
        self.openssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            &format!("/CN=usher test {name}"),
        ])?;
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-set_serial",
            "1",
            "-out",
            &pem,
            "-days",
            "2",
            "-extfile",
            &ext,
        ])
    }

    fn openssl(&self, args: &[&str]) -> anyhow::Result<()> {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .context("cannot run openssl (install it to run the TLS tests)")?;
        ensure!(
            out.status.success(),
            "openssl {} failed: {}",
            args.first().copied().unwrap_or_default(),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
    pub fn ca(&self) -> PathBuf {
        self.file("ca.pem")
    }
    pub fn server_cert(&self) -> PathBuf {
        self.file("server.pem")
    }
    pub fn server_key(&self) -> PathBuf {
        self.file("server.key")
    }
    pub fn client_cert(&self) -> PathBuf {
        self.file("client.pem")
    }
    pub fn client_key(&self) -> PathBuf {
        self.file("client.key")
    }
}
