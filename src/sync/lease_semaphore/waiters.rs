//! Which permit counts this client's waiters of a semaphore want, so a wakeup that reached a
//! waiter that cannot use the free permits is passed on only when another local waiter can.
//!
//! A release publishes one message, and each client's listener wakes one of its waiters.
//! That waiter may want more permits than are free (an `acquire_many`), or may leave some
//! free after taking its own: then the free permits would wait for the next release or
//! expiry although a waiter here could take them. So after each attempt the waiter passes the
//! wakeup to the next local waiter if one wants at most what is free. Tokio's `notify_one`
//! wakes the waiters in the order they registered and every waiter registers again before
//! it looks, so the wakeup travels the whole queue before it comes back, and it stops as
//! soon as nobody here fits: no ping-pong between waiters that cannot use it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{LazyLock, Mutex};

/// Per `<client id>\n<channel>`: permit count -> how many waiters want that many.
static WAITING: LazyLock<Mutex<HashMap<String, BTreeMap<u64, usize>>>> =
    LazyLock::new(Default::default);

/// One waiter's entry, removed when dropped (whatever way its acquire ends).
pub(super) struct Waiter {
    key: String,
    k: u64,
}

impl Waiter {
    pub(super) fn new(client_id: &str, channel: &str, k: u64) -> Waiter {
        let key = format!("{client_id}\n{channel}");
        let mut map = WAITING.lock().unwrap_or_else(|e| e.into_inner());
        *map.entry(key.clone()).or_default().entry(k).or_default() += 1;
        Waiter { key, k }
    }

    /// Whether another waiter of this client and channel wants at most `free` permits.
    pub(super) fn another_fits(&self, free: u64) -> bool {
        if free == 0 {
            return false;
        }
        let map = WAITING.lock().unwrap_or_else(|e| e.into_inner());
        let Some(counts) = map.get(&self.key) else {
            return false;
        };
        let fitting: usize = counts.range(..=free).map(|(_, n)| n).sum();
        let me = usize::from(self.k <= free);
        fitting > me
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut map = WAITING.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(counts) = map.get_mut(&self.key) {
            if let Some(n) = counts.get_mut(&self.k) {
                *n -= 1;
                if *n == 0 {
                    counts.remove(&self.k);
                }
            }
            if counts.is_empty() {
                map.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_on_only_to_another_waiter_that_fits() {
        let a = Waiter::new("c", "ch-fit", 2);
        assert!(!a.another_fits(5), "alone: nobody to pass to");
        let b = Waiter::new("c", "ch-fit", 3);
        assert!(!b.another_fits(1), "nobody wants 1 or less");
        assert!(b.another_fits(2), "a wants 2");
        let other_client = Waiter::new("d", "ch-fit", 1);
        assert!(
            !b.another_fits(1),
            "a waiter of another client does not count"
        );
        drop(a);
        assert!(!b.another_fits(2));
        drop(other_client);
        drop(b);
        assert!(
            !WAITING.lock().unwrap().contains_key("c\nch-fit"),
            "cleaned up"
        );
    }
}
