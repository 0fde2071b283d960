//! Sharing a kernel's runs of VMs among threads (rayon's work stealing in a pool of the
//! caller's size). A kernel cuts its VMs into runs that write disjoint slices and whose
//! values do not depend on each other (each VM's arithmetic is its own, each draw a
//! function of its key: crate::rng), so the outputs are the same bits whichever thread
//! runs which run, in whatever order, on one thread or several.

use rayon::prelude::*;
use std::sync::{Arc, Mutex, OnceLock};

/// How a kernel's runs execute: in order on the calling thread, or shared among a pool's.
#[derive(Debug, Clone, Copy)]
pub struct Threads {
    shared: bool,
}

impl Threads {
    /// `f` of every run.
    pub fn for_each<T: Send>(self, runs: Vec<T>, f: impl Fn(T) + Sync + Send) {
        if self.shared {
            runs.into_par_iter().for_each(f);
        } else {
            runs.into_iter().for_each(f);
        }
    }
}

/// `f` with `threads` threads to share its runs among: the calling thread alone when 1
/// (no pool, no hand-over), else a pool of that many kept for the next call (made once;
/// if the system refuses the threads, the calling thread alone: the same outputs).
pub fn with_threads<R: Send>(threads: usize, f: impl FnOnce(Threads) -> R + Send) -> R {
    match (threads > 1).then(|| pool(threads)).flatten() {
        Some(p) => p.install(|| f(Threads { shared: true })),
        None => f(Threads { shared: false }),
    }
}

fn pool(threads: usize) -> Option<Arc<rayon::ThreadPool>> {
    type Pools = Mutex<Vec<(usize, Arc<rayon::ThreadPool>)>>;
    static POOLS: OnceLock<Pools> = OnceLock::new();
    let mut pools = POOLS
        .get_or_init(Pools::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, p)) = pools.iter().find(|(t, _)| *t == threads) {
        return Some(Arc::clone(p));
    }
    let p = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("sova-core-{i}"))
        .build()
        .ok()?;
    let p = Arc::new(p);
    pools.push((threads, Arc::clone(&p)));
    Some(p)
}
