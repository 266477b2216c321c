//! The stock experiment: 150 purchase requests for 100 items, served by two app
//! instances (two OS processes, each with its own `lockwise::Client`).
//!
//! Each request reads the stock (`GET`), does a little "work" (sleeps 1-5 ms), writes the
//! decremented stock back (`SET`) if it was positive, and counts a sale. The experiment
//! runs twice:
//!
//! * without a lock: requests interleave, so several of them sell the same item;
//! * with `lockwise` around the read-modify-write: exactly 100 sold, final stock 0.
//!
//! ```text
//! cargo run --release --example inventory               # starts a throwaway redis-server
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example inventory   # uses that server
//! ```
//!
//! The process exits non-zero if the locked run is not exactly right.
//!
//! Internally the example re-executes itself with `--instance <name> ...` for each app
//! instance; the parent starts both, releases them at the same moment and adds up
//! their results.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use lockwise::redis::{self, AsyncCommands};

use lockwise_testkit::server;

/// The example's error type.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

const INITIAL_STOCK: i64 = 100;
const INSTANCES: [&str; 2] = ["A", "B"];
const REQUESTS_PER_INSTANCE: usize = 75;
const STOCK_KEY: &str = "inventory:stock:sku-1";
const LOCK_NAME: &str = "stock:sku-1";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    NoLock,
    Lockwise,
}

impl Mode {
    fn arg(self) -> &'static str {
        match self {
            Mode::NoLock => "nolock",
            Mode::Lockwise => "lockwise",
        }
    }

    fn parse(s: &str) -> Result<Mode, BoxError> {
        match s {
            "nolock" => Ok(Mode::NoLock),
            "lockwise" => Ok(Mode::Lockwise),
            other => Err(format!("unknown mode {other:?} (nolock | lockwise)").into()),
        }
    }

    fn label(self) -> &'static str {
        match self {
            Mode::NoLock => "no lock",
            Mode::Lockwise => "lockwise",
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = if args.first().map(String::as_str) == Some("--instance") {
        instance_main(&args)
    } else if args.is_empty() {
        parent_main()
    } else {
        Err(format!(
            "unexpected arguments {args:?}\nusage: cargo run --example inventory \
             (set REDIS_URL to use an existing server)"
        )
        .into())
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("inventory: error: {e}");
            ExitCode::FAILURE
        }
    }
}

// ---------------------------------------------------------------------------------------
// Parent: sets up Redis, runs both modes, prints the table.
// ---------------------------------------------------------------------------------------

struct RunResult {
    mode: Mode,
    requests: usize,
    sold: u64,
    errors: u64,
    final_stock: i64,
    elapsed: Duration,
}

fn parent_main() -> Result<ExitCode, BoxError> {
    // Keep the server (if we started one) alive until the end of this function;
    // its Drop kills it, also on every error path.
    let (url, _server) = server::url_or_start(&[])?;

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut conn = rt.block_on(async {
        redis::Client::open(url.as_str())?
            .get_multiplexed_async_connection()
            .await
    })?;

    let requests = INSTANCES.len() * REQUESTS_PER_INSTANCE;
    println!(
        "stock experiment: {requests} purchase requests for {INITIAL_STOCK} items, \
         {} app instances (processes) x {REQUESTS_PER_INSTANCE} concurrent requests",
        INSTANCES.len()
    );
    println!("redis: {url}");
    println!();

    let mut results = Vec::new();
    for mode in [Mode::NoLock, Mode::Lockwise] {
        rt.block_on(conn.set::<_, _, ()>(STOCK_KEY, INITIAL_STOCK))?;
        let (sold, errors, elapsed) = run_instances(&url, mode)?;
        let final_stock: i64 = rt.block_on(conn.get(STOCK_KEY))?;
        results.push(RunResult {
            mode,
            requests,
            sold,
            errors,
            final_stock,
            elapsed,
        });
    }
    rt.block_on(conn.del::<_, ()>(STOCK_KEY))?;

    print_table(&results);

    let locked = results.iter().find(|r| r.mode == Mode::Lockwise).unwrap();
    println!();
    if locked.sold == INITIAL_STOCK as u64 && locked.final_stock == 0 && locked.errors == 0 {
        println!("OK: with lockwise exactly {INITIAL_STOCK} sold and the stock ends at 0");
        Ok(ExitCode::SUCCESS)
    } else {
        println!(
            "FAILED: with lockwise {} sold, final stock {}, {} errors (expected {INITIAL_STOCK}, 0, 0)",
            locked.sold, locked.final_stock, locked.errors
        );
        Ok(ExitCode::FAILURE)
    }
}

fn print_table(results: &[RunResult]) {
    println!(
        "{:<8} | {:>8} | {:>4} | {:>11} | {:>8} | {:>8}",
        "mode", "requests", "sold", "final stock", "oversold", "elapsed"
    );
    println!("{}", "-".repeat(8 + 8 + 4 + 11 + 8 + 8 + 5 * 3));
    for r in results {
        let oversold = r.sold.saturating_sub(INITIAL_STOCK as u64);
        println!(
            "{:<8} | {:>8} | {:>4} | {:>11} | {:>8} | {:>5} ms",
            r.mode.label(),
            r.requests,
            r.sold,
            r.final_stock,
            oversold,
            r.elapsed.as_millis()
        );
        if r.errors > 0 {
            println!("         ({} requests failed, see stderr)", r.errors);
        }
    }
}

/// One app instance process, killed if still running when dropped (e.g. on an error).
struct Instance {
    name: &'static str,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Instance {
    fn spawn(name: &'static str, url: &str, mode: Mode) -> Result<Instance, BoxError> {
        let mut child = Command::new(std::env::current_exe()?)
            .args(["--instance", name, "--url", url, "--mode", mode.arg()])
            .args(["--requests", &REQUESTS_PER_INSTANCE.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        Ok(Instance {
            name,
            child,
            stdin,
            stdout,
        })
    }

    /// Next line the instance prints, or an error if it exited.
    fn read_line(&mut self) -> Result<String, BoxError> {
        let mut line = String::new();
        if self.stdout.read_line(&mut line)? == 0 {
            let status = self.child.wait()?;
            return Err(format!("instance {} exited early ({status})", self.name).into());
        }
        Ok(line.trim_end().to_string())
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Starts every instance, waits until all are connected, releases them together and
/// collects (sold, errors, elapsed).
fn run_instances(url: &str, mode: Mode) -> Result<(u64, u64, Duration), BoxError> {
    let mut instances = INSTANCES
        .iter()
        .map(|name| Instance::spawn(name, url, mode))
        .collect::<Result<Vec<_>, _>>()?;
    for inst in &mut instances {
        let line = inst.read_line()?;
        if line != "READY" {
            return Err(format!("instance {}: expected READY, got {line:?}", inst.name).into());
        }
    }
    let start = Instant::now();
    for inst in &mut instances {
        let mut stdin = inst.stdin.take().expect("stdin");
        stdin.write_all(b"GO\n")?;
        // Dropping stdin closes the pipe; the instance only needed the one line.
    }
    let (mut sold, mut errors) = (0, 0);
    for inst in &mut instances {
        let line = inst.read_line()?;
        let (s, e) = parse_result(&line)
            .ok_or_else(|| format!("instance {}: bad result line {line:?}", inst.name))?;
        sold += s;
        errors += e;
    }
    let elapsed = start.elapsed();
    for inst in &mut instances {
        let status = inst.child.wait()?;
        if !status.success() {
            return Err(format!("instance {} failed ({status})", inst.name).into());
        }
    }
    Ok((sold, errors, elapsed))
}

/// Parses "RESULT sold=<n> errors=<n>".
fn parse_result(line: &str) -> Option<(u64, u64)> {
    let rest = line.strip_prefix("RESULT ")?;
    let mut sold = None;
    let mut errors = None;
    for field in rest.split_whitespace() {
        match field.split_once('=')? {
            ("sold", v) => sold = v.parse().ok(),
            ("errors", v) => errors = v.parse().ok(),
            _ => {}
        }
    }
    Some((sold?, errors?))
}

// ---------------------------------------------------------------------------------------
// Instance: one app process serving its share of the purchase requests.
// ---------------------------------------------------------------------------------------

struct InstanceArgs {
    url: String,
    mode: Mode,
    requests: usize,
}

fn parse_instance_args(args: &[String]) -> Result<InstanceArgs, BoxError> {
    let mut url = None;
    let mut mode = None;
    let mut requests = None;
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .ok_or_else(|| format!("missing value for {flag}"))?;
        match flag.as_str() {
            "--instance" => {}
            "--url" => url = Some(value.clone()),
            "--mode" => mode = Some(Mode::parse(value)?),
            "--requests" => requests = Some(value.parse()?),
            other => return Err(format!("unknown flag {other}").into()),
        }
    }
    Ok(InstanceArgs {
        url: url.ok_or("--url is required")?,
        mode: mode.ok_or("--mode is required")?,
        requests: requests.ok_or("--requests is required")?,
    })
}

fn instance_main(args: &[String]) -> Result<ExitCode, BoxError> {
    let args = parse_instance_args(args)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (sold, errors) = rt.block_on(serve(args))?;
    println!("RESULT sold={sold} errors={errors}");
    Ok(ExitCode::SUCCESS)
}

async fn serve(args: InstanceArgs) -> Result<(u64, u64), BoxError> {
    let client = lockwise::Client::connect(&args.url).await?;
    let conn = redis::Client::open(args.url.as_str())?
        .get_multiplexed_async_connection()
        .await?;

    // Tell the parent we are connected, then wait for the common start signal.
    println!("READY");
    std::io::stdout().flush()?;
    let go = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await??;
    if go.trim() != "GO" {
        return Err("parent went away before the start signal".into());
    }

    // One spawned task per request: reentrancy is per (Client, task), so requests
    // must run in separate tasks to exclude each other (futures joined inside one task
    // would all be the same owner).
    let tasks: Vec<_> = (0..args.requests)
        .map(|_| {
            let lock = client.lock(LOCK_NAME);
            let conn = conn.clone();
            let mode = args.mode;
            tokio::spawn(async move {
                match mode {
                    Mode::NoLock => purchase(conn).await,
                    Mode::Lockwise => {
                        let guard = lock.lock().await?;
                        let sold = purchase(conn).await;
                        guard.unlock().await?;
                        sold
                    }
                }
            })
        })
        .collect();

    let (mut sold, mut errors) = (0, 0);
    for task in tasks {
        match task.await? {
            Ok(true) => sold += 1,
            Ok(false) => {}
            Err(e) => {
                eprintln!("purchase failed: {e}");
                errors += 1;
            }
        }
    }
    Ok((sold, errors))
}

/// The unsafe read-modify-write: GET, think, SET. Returns whether an item was sold.
async fn purchase(mut conn: redis::aio::MultiplexedConnection) -> Result<bool, BoxError> {
    let stock: i64 = conn.get(STOCK_KEY).await?;
    tokio::time::sleep(Duration::from_millis(rand::random_range(1..=5))).await;
    if stock <= 0 {
        return Ok(false);
    }
    let _: () = conn.set(STOCK_KEY, stock - 1).await?;
    Ok(true)
}
