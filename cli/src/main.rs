//! `lockwise`: the operator CLI, a thin layer over [`lockwise::Admin`].
//!
//! Exit codes: 0 done (nothing found for `leaks`), 1 `leaks` found something, 2 an error
//! (connection, Redis, bad argument), 3 `force-unlock` not confirmed.
//!
//!   main.rs    arguments, connecting, dispatch
//!   render.rs  text tables and `--json` output
//!   watch.rs   the refreshing `watch` view

mod render;
mod watch;

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use lockwise::{Client, DEFAULT_NAMESPACE, DEFAULT_SCAN_LIMIT};

/// Inspect and repair lockwise locks on Redis: list, inspect, leaks, force-unlock, watch.
#[derive(Parser, Debug)]
#[command(name = "lockwise", version)]
struct Cli {
    #[command(flatten)]
    target: Target,
    /// Key namespace of the locks (the library's `ClientBuilder::namespace`).
    #[arg(long, global = true, default_value = DEFAULT_NAMESPACE)]
    namespace: String,
    /// Read locks in Redisson's key layout (`redisson`: the hashes Java services using
    /// Redisson, and lockwise clients built with `KeyLayout::Redisson`, lock with) instead
    /// of lockwise's own (`lockwise`).
    #[arg(long, global = true, value_enum, default_value = "lockwise")]
    layout: Layout,
    /// Machine-readable output (one JSON document).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

/// The key layout to read (`--layout`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    /// lockwise's own keys, `<namespace>:<role>:{<name>}`.
    Lockwise,
    /// Redisson's: the lock hash is the bare name.
    Redisson,
}

/// Where the servers are: a URL, a Sentinel set, or a Cluster.
#[derive(Args, Debug)]
struct Target {
    /// A standalone server, `redis://[user:password@]host[:port][/db]`.
    #[arg(
        long,
        global = true,
        env = "REDIS_URL",
        default_value = "redis://127.0.0.1:6379"
    )]
    url: String,
    /// A sentinel, `host:port` or a `redis://` URL (repeat for several); needs --master.
    #[arg(long, global = true, requires = "master")]
    sentinel: Vec<String>,
    /// The Sentinel master name.
    #[arg(long, global = true)]
    master: Option<String>,
    /// A PEM file of the CA that signed the server's certificate, for a `rediss://` --url
    /// whose CA is not among the system's roots (a private CA).
    #[arg(long, global = true)]
    tls_ca: Option<std::path::PathBuf>,
    /// Password of the Sentinel master.
    #[arg(
        long,
        global = true,
        env = "LOCKWISE_MASTER_PASSWORD",
        hide_env_values = true
    )]
    master_password: Option<String>,
    /// A Cluster seed node URL (repeat for several).
    #[arg(long, global = true, conflicts_with = "sentinel")]
    cluster: Vec<String>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Every lock with kind, holders, TTL, queue length and waiters, most contended first.
    List {
        /// Scan at most this many keys.
        #[arg(long, default_value_t = DEFAULT_SCAN_LIMIT)]
        limit: usize,
    },
    /// Everything about one lock name: its keys, owners, queue, fencing token.
    Inspect {
        /// The lock name.
        name: String,
    },
    /// Keys without a TTL, stale fair-queue entries, holds of gone clients. Exit code 1
    /// when something is found.
    Leaks {
        /// Scan at most this many keys.
        #[arg(long, default_value_t = DEFAULT_SCAN_LIMIT)]
        limit: usize,
        /// Do not match holds to live clients (one EXISTS per owner on the presence keys
        /// that every live client and RedLock set keeps): report only keys without a TTL and
        /// stale fair-queue entries.
        #[arg(long)]
        no_owner_check: bool,
    },
    /// Release a lock whoever holds it and wake its waiters.
    ForceUnlock {
        /// The lock name.
        name: String,
        /// Do not ask for confirmation.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// A refreshing view of the busiest locks (like `top`).
    Watch {
        /// Seconds between refreshes.
        #[arg(long, default_value_t = 2.0)]
        interval: f64,
        /// Stop after this many refreshes (default: until interrupted).
        #[arg(long)]
        iterations: Option<u64>,
        /// Locks shown.
        #[arg(long, default_value_t = 20)]
        top: usize,
        /// Scan at most this many keys per refresh.
        #[arg(long, default_value_t = DEFAULT_SCAN_LIMIT)]
        limit: usize,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lockwise: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => ExitCode::from(code),
        // The reader went away (`lockwise list | head`): nothing left to say to anyone.
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("lockwise: {e}");
            ExitCode::from(2)
        }
    }
}

async fn connect(cli: &Cli) -> lockwise::Result<Client> {
    let t = &cli.target;
    let builder = if !t.cluster.is_empty() {
        Client::cluster_builder(t.cluster.clone())
    } else if !t.sentinel.is_empty() {
        let sentinels = t.sentinel.iter().map(|s| {
            if s.contains("://") {
                s.clone()
            } else {
                format!("redis://{s}")
            }
        });
        let mut b = Client::sentinel_builder(sentinels, t.master.clone().unwrap_or_default());
        if let Some(p) = &t.master_password {
            b = b.master_password(p);
        }
        b
    } else if let Some(ca) = &t.tls_ca {
        let root_cert = std::fs::read(ca).map_err(|e| lockwise::Error::InvalidArgument {
            argument: "tls-ca",
            reason: format!("cannot read {}: {e}", ca.display()),
        })?;
        let certs = lockwise::redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(root_cert),
        };
        Client::builder_from(&lockwise::redis::Client::build_with_tls(
            t.url.as_str(),
            certs,
        )?)
    } else {
        Client::builder(t.url.clone())
    };
    // Only `force-unlock` writes: every other command runs on a read-only client, which
    // sends reads alone and so works under a Redis user that may only read.
    let read_only = !matches!(cli.command, Command::ForceUnlock { .. });
    let layout = match cli.layout {
        Layout::Lockwise => lockwise::KeyLayout::Lockwise,
        Layout::Redisson => lockwise::KeyLayout::Redisson,
    };
    builder
        .namespace(cli.namespace.clone())
        .key_layout(layout)
        .read_only(read_only)
        .build()
        .await
}

/// Any failure: lockwise's errors, or writing the output.
type Failure = Box<dyn std::error::Error>;

async fn run(cli: Cli) -> Result<u8, Failure> {
    let client = connect(&cli).await?;
    let admin = client.admin();
    let scanning = |limit: usize| admin.clone().scan_limit(limit);
    let out = &mut std::io::stdout().lock();
    match &cli.command {
        Command::List { limit } => {
            let listing = scanning(*limit).list().await?;
            render::listing(out, &listing, usize::MAX, cli.json)?;
            Ok(0)
        }
        Command::Inspect { name } => {
            let infos = admin.inspect(name).await?;
            render::inspection(out, name, &infos, cli.json)?;
            Ok(0)
        }
        Command::Leaks {
            limit,
            no_owner_check,
        } => {
            let report = scanning(*limit)
                .owner_check(!no_owner_check)
                .leaks()
                .await?;
            render::leaks(out, &report, cli.json)?;
            Ok(if report.leaks.is_empty() { 0 } else { 1 })
        }
        Command::ForceUnlock { name, yes } => {
            if !yes && !confirm(name)? {
                eprintln!("lockwise: not confirmed; nothing changed");
                return Ok(3);
            }
            let released = admin.force_unlock(name).await?;
            render::unlocked(out, name, &released, cli.json)?;
            Ok(0)
        }
        Command::Watch {
            interval,
            iterations,
            top,
            limit,
        } => {
            if !interval.is_finite() || *interval < 0.05 {
                return Err(format!("--interval must be at least 0.05 s, got {interval}").into());
            }
            let every = Duration::from_secs_f64(*interval);
            let terminal = std::io::stdout().is_terminal();
            let admin = scanning(*limit);
            watch::run(out, terminal, &admin, every, *iterations, *top, cli.json).await?;
            Ok(0)
        }
    }
}

/// Asks on the terminal; refuses without asking when stdin is not one.
fn confirm(name: &str) -> std::io::Result<bool> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        eprintln!("lockwise: stdin is not a terminal: pass --yes to force-unlock {name:?}");
        return Ok(false);
    }
    eprint!("Force-unlock {name:?}? Its holders lose it at once. [y/N] ");
    std::io::stderr().flush()?;
    let mut answer = String::new();
    stdin.lock().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes" | "YES"))
}
