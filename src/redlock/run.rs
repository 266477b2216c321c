//! The hold runs of a [`RedLockSet`](super::RedLockSet): which local guards of one (lock,
//! owner) hold which nodes, so a guard counts, extends and releases only its own holds.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::node::NodeReply;
use super::round::quorum;
use super::{LockInner, RedLock};

/// The local guards of one (lock, owner) since it was last granted afresh: a *hold run*.
///
/// A node keeps one count per owner, so there the holds of two guards of one task look alike.
/// The run tells them apart: it knows the count each node should show, and each guard knows
/// the *generation* of every node it was granted on. When a node's count stops adding up (its
/// holds expired, were released behind the guards' back, or another owner holds it), the node
/// starts a new generation: the older guards no longer count that node, nor release anything
/// there. A guard left with fewer than a quorum of nodes is lost.
///
/// A re-entry joins the run only if a quorum of the nodes show that it re-entered the run's
/// holds (a count above 1, one more than the run's). Otherwise it is a fresh hold: a new run
/// with its own epoch, and every guard of the old run is lost and releases nothing (its holds
/// may be gone, and the counts left on the nodes now count the new run's).
pub(super) struct HoldRun {
    pub(super) epoch: u64,
    pub(super) nodes: Vec<RunNode>,
    pub(super) guards: Vec<Member>,
}

/// One node as a hold run knows it.
#[derive(Clone, Copy, Default)]
pub(super) struct RunNode {
    /// The owner's hold count there as the run left it: its guards' holds, plus the holds of
    /// lost guards of the same owner that it took over (released with its last guard there).
    pub(super) count: u32,
    generation: u32,
}

impl RunNode {
    /// The run's holds here are gone: the guards granted so far no longer hold this node.
    fn gone(&mut self) {
        self.count = 0;
        self.generation = self.generation.wrapping_add(1);
    }
}

/// One guard of a hold run.
pub(super) struct Member {
    id: u64,
    /// Per node, the generation this guard was granted at (`None`: not granted there).
    granted: Vec<Option<u32>>,
    lost: CancellationToken,
}

impl HoldRun {
    fn new(epoch: u64, nodes: usize) -> HoldRun {
        HoldRun {
            epoch,
            nodes: vec![RunNode::default(); nodes],
            guards: Vec::new(),
        }
    }

    fn holds(&self, member: &Member, node: usize) -> bool {
        member.granted[node] == Some(self.nodes[node].generation)
    }

    /// The nodes (index, generation) where `member` still holds the lock.
    fn held_by(&self, member: &Member) -> Vec<(usize, u32)> {
        (0..self.nodes.len())
            .filter(|&i| self.holds(member, i))
            .map(|i| (i, self.nodes[i].generation))
            .collect()
    }

    /// On how many nodes `replies` re-entered this run's holds.
    fn reentered(&self, replies: &[NodeReply]) -> usize {
        replies
            .iter()
            .zip(&self.nodes)
            .filter(
                |(r, node)| matches!(r, NodeReply::Granted(h) if *h > 1 && *h == node.count + 1),
            )
            .count()
    }

    /// Takes in what a round saw: a node that another owner holds, or that granted a new hold
    /// (count 1), no longer has the run's holds.
    pub(super) fn observe(&mut self, replies: &[NodeReply]) {
        for (node, reply) in self.nodes.iter_mut().zip(replies) {
            if node.count > 0 && matches!(reply, NodeReply::Held | NodeReply::Granted(1)) {
                node.gone();
            }
        }
    }

    /// Adds the guard of a granted round. A node whose count does not add up (other than the
    /// run's count plus one) starts a new generation that only this guard holds, with every
    /// hold the node shows: they are this owner's, and no older guard can tell whether one of
    /// them is its own.
    fn join(&mut self, id: u64, replies: &[NodeReply], lost: CancellationToken) {
        let granted = replies
            .iter()
            .zip(&mut self.nodes)
            .map(|(reply, node)| match reply {
                NodeReply::Granted(h) => {
                    if *h != node.count + 1 {
                        node.gone();
                    }
                    node.count = *h;
                    Some(node.generation)
                }
                _ => None,
            })
            .collect();
        self.guards.push(Member { id, granted, lost });
    }

    /// Marks lost every guard that holds fewer than a quorum of the nodes.
    pub(super) fn check(&self, name: &str) {
        let needed = quorum(self.nodes.len());
        for member in &self.guards {
            if self.held_by(member).len() < needed {
                lose(
                    &member.lost,
                    name,
                    "its hold is known on fewer than a majority of the nodes",
                );
            }
        }
    }

    /// Removes guard `id`. Returns, per node it still holds, (node, generation, holds to
    /// release): its own hold, and where it was the run's last guard, every hold the run has
    /// there. `None` if it is not a guard of this run.
    pub(super) fn leave(&mut self, id: u64) -> Option<Vec<(usize, u32, u32)>> {
        let at = self.guards.iter().position(|m| m.id == id)?;
        let member = self.guards.swap_remove(at);
        let mut releases = Vec::new();
        for i in 0..self.nodes.len() {
            if !self.holds(&member, i) {
                continue;
            }
            let shared = self.guards.iter().any(|other| self.holds(other, i));
            let node = &mut self.nodes[i];
            let holds = if shared { 1 } else { node.count.max(1) };
            node.count = node.count.saturating_sub(holds);
            releases.push((i, node.generation, holds));
        }
        Some(releases)
    }
}

impl RedLock {
    /// Records a granted round in the set's registry: the guard joins the owner's hold run if
    /// a quorum of the nodes show it re-entered that run's holds; otherwise it starts a new
    /// run, and every guard of the old one is lost (see [`HoldRun`]).
    pub(super) fn register(
        &self,
        hold_id: (Arc<str>, Arc<str>),
        replies: &[NodeReply],
    ) -> Registered {
        let (set, name) = (&self.inner.set, &self.inner.name);
        let n = self.inner.nodes.len();
        let id = set.next_guard.fetch_add(1, Ordering::Relaxed);
        let lost = CancellationToken::new();
        let new_run = || HoldRun::new(set.next_epoch.fetch_add(1, Ordering::Relaxed), n);
        let mut run = set.holds.entry(hold_id).or_insert_with(new_run);
        if !run.guards.is_empty() && run.reentered(replies) >= quorum(n) {
            run.observe(replies);
            run.join(id, replies, lost.clone());
            // Older guards that lost nodes to this round may be left without a quorum.
            run.check(name);
        } else {
            let old = std::mem::replace(&mut *run, new_run());
            for member in &old.guards {
                lose(
                    &member.lost,
                    name,
                    "its owner locked it again and found its holds on fewer than a majority of the nodes",
                );
            }
            run.join(id, replies, lost.clone());
        }
        Registered {
            epoch: run.epoch,
            id,
            lost,
        }
    }
}

impl LockInner {
    pub(super) fn hold_id(&self, owner: &Arc<str>) -> (Arc<str>, Arc<str>) {
        (self.name.clone(), owner.clone())
    }

    /// The nodes (index, generation) where guard `id` of run `epoch` still holds the lock;
    /// `None` once the guard left its run or the run ended.
    pub(super) fn held(&self, owner: &Arc<str>, epoch: u64, id: u64) -> Option<Vec<(usize, u32)>> {
        let run = self.set.holds.get(&self.hold_id(owner))?;
        let member = run.guards.iter().find(|m| m.id == id);
        match member {
            Some(member) if run.epoch == epoch => Some(run.held_by(member)),
            _ => None,
        }
    }

    /// Notes that run `epoch`'s holds on `nodes` (index, generation when asked) are gone;
    /// its guards left with fewer than a quorum of the nodes are lost.
    pub(super) fn gone(&self, owner: &Arc<str>, epoch: u64, nodes: &[(usize, u32)]) {
        if nodes.is_empty() {
            return;
        }
        let Some(mut run) = self.set.holds.get_mut(&self.hold_id(owner)) else {
            return;
        };
        if run.epoch != epoch {
            return;
        }
        for &(i, generation) in nodes {
            if run.nodes[i].generation == generation {
                run.nodes[i].gone();
            }
        }
        run.check(&self.name);
    }
}

/// A guard's entry in its hold run.
pub(super) struct Registered {
    pub(super) epoch: u64,
    pub(super) id: u64,
    pub(super) lost: CancellationToken,
}

pub(super) fn lose(lost: &CancellationToken, name: &str, why: &str) {
    if !lost.is_cancelled() {
        tracing::warn!(lock = %name, kind = "redlock", reason = why, "lock lost");
        lost.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Replies of a round: a hold count per node, 0 for "held by another owner".
    fn round(counts: &[u32]) -> Vec<NodeReply> {
        counts
            .iter()
            .map(|&h| match h {
                0 => NodeReply::Held,
                h => NodeReply::Granted(h),
            })
            .collect()
    }

    fn amounts(releases: Option<Vec<(usize, u32, u32)>>) -> Vec<(usize, u32)> {
        releases
            .expect("a guard of the run")
            .into_iter()
            .map(|(node, _, holds)| (node, holds))
            .collect()
    }

    #[test]
    fn reentry_joins_only_where_the_counts_add_up() {
        let mut run = HoldRun::new(1, 3);
        let (first, second) = (CancellationToken::new(), CancellationToken::new());
        run.join(1, &round(&[1, 1, 1]), first.clone());
        // Node 0 lost the first hold (a new hold counts 1 there); nodes 1 and 2 re-entered.
        let replies = round(&[1, 2, 2]);
        assert_eq!(run.reentered(&replies), 2);
        assert_eq!(run.reentered(&round(&[1, 1, 2])), 1);
        assert_eq!(run.reentered(&round(&[3, 3, 2])), 1, "3 is not 1 + 1");
        run.observe(&replies);
        run.join(2, &replies, second.clone());
        run.check("x");
        assert_eq!(run.held_by(&run.guards[0]).len(), 2);
        assert_eq!(run.held_by(&run.guards[1]).len(), 3);
        assert!(!first.is_cancelled() && !second.is_cancelled());
        // Node 1 is found gone: the first guard is left with one node.
        run.nodes[1].gone();
        run.check("x");
        assert!(first.is_cancelled() && !second.is_cancelled());
        // Each guard releases only where its hold is known; the last one there releases all.
        assert_eq!(amounts(run.leave(1)), vec![(2, 1)]);
        assert_eq!(amounts(run.leave(2)), vec![(0, 1), (2, 1)]);
        assert!(run.leave(2).is_none());
        assert!(run.nodes.iter().all(|n| n.count == 0));
    }

    #[test]
    fn another_owner_on_a_node_ends_the_runs_holds_there() {
        let mut run = HoldRun::new(1, 3);
        let first = CancellationToken::new();
        run.join(1, &round(&[1, 1, 1]), first.clone());
        run.observe(&round(&[0, 2, 2]));
        run.check("x");
        assert!(!first.is_cancelled());
        run.observe(&round(&[0, 0, 2]));
        run.check("x");
        assert!(first.is_cancelled());
    }

    #[test]
    fn the_last_guard_on_a_node_releases_the_holds_the_run_took_over() {
        let mut run = HoldRun::new(1, 3);
        let token = CancellationToken::new;
        // Node 0 also shows two holds nobody claims (of lost guards of the same owner).
        run.join(1, &round(&[3, 1, 1]), token());
        run.join(2, &round(&[4, 2, 2]), token());
        assert_eq!(amounts(run.leave(2)), vec![(0, 1), (1, 1), (2, 1)]);
        assert_eq!(amounts(run.leave(1)), vec![(0, 3), (1, 1), (2, 1)]);
    }
}
