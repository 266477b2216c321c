//! `watch`: clear the terminal and redraw the busiest locks every interval (plain ANSI); into
//! a pipe or a file, one table after another with no control codes.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lockwise::Admin;

use crate::render;

/// Redraws until `iterations` refreshes were shown (forever when `None`). With `json`, one
/// JSON line per refresh instead of a screen; without a `terminal`, each refresh follows the
/// last after a blank line instead of clearing the screen.
pub(crate) async fn run(
    out: &mut impl Write,
    terminal: bool,
    admin: &Admin,
    every: Duration,
    iterations: Option<u64>,
    top: usize,
    json: bool,
) -> Result<(), crate::Failure> {
    let mut shown = 0u64;
    loop {
        let listing = admin.list().await?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let clock = format!(
            "{:02}:{:02}:{:02} UTC",
            now / 3600 % 24,
            now / 60 % 60,
            now % 60
        );
        if json {
            render::listing(out, &listing, top, true)?;
        } else {
            if terminal {
                // Clear the screen, cursor home.
                write!(out, "\x1b[2J\x1b[H")?;
            } else if shown > 0 {
                writeln!(out)?;
            }
            writeln!(
                out,
                "lockwise watch  {clock}  {} locks, {} keys scanned, every {:.1}s\n",
                listing.locks.len(),
                listing.scanned,
                every.as_secs_f64()
            )?;
            render::table(out, &render::lock_rows(&listing.locks, top))?;
        }
        out.flush()?;
        shown += 1;
        if iterations.is_some_and(|n| shown >= n) {
            return Ok(());
        }
        tokio::time::sleep(every).await;
    }
}
