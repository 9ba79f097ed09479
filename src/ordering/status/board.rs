//! The status board: the answers this process gave its shoppers' lookups, kept
//! until Postgres says the order changed, so that a poll whose answer has not
//! changed costs no query; and the long polls waiting for a change.
//!
//! Every change of `voucher_orders` (a worker storing orders, pay, cancel, the
//! payment timeout, anything else) is announced when it commits, by a trigger
//! (`migrations/0029_order_changes.sql`) on the channel [`CHANNEL`], with each
//! row as the change left it. [`follow`](super::listen::follow) listens. An
//! announcement replaces the answers of its rows with what a lookup would read
//! now (so a stored order's first poll needs no query either), and drops those it
//! cannot stand for. An answer a lookup read is kept with the tick the board was
//! at before the read, and is served only while no announcement that names its
//! order (or its shopper's order of the sale) came after that tick: an answer
//! read while a change committed is not kept.
//!
//! An announcement lost would leave an answer stale for good, so the board serves
//! nothing while it cannot be sure it hears them all: before the listener is
//! connected, after its connection drops (the board is emptied: what was
//! announced meanwhile is unknown), and whenever the last of its pings (a
//! notification sent every [`PING_EVERY`]) that came back was sent more than
//! [`MAX_STALE`] ago (Postgres delivers a listener's notifications in commit
//! order: a ping heard means every change committed before it was sent was
//! heard). So an answer is never more than [`MAX_STALE`] (1 s) older than a change
//! committed on any instance.
//!
//! A pending answer is served from the board only while its sale is open here: a
//! shard being repaired answers 503, as a lookup would.
use super::announce::Changed;
use crate::ordering::model::Order;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The channel of `voucher_orders`' changes.
pub const CHANNEL: &str = "seckill_orders";
/// How often the listener checks that it still hears the channel.
pub const PING_EVERY: Duration = Duration::from_millis(400);
/// The most answers (and changes remembered) kept; past it the board starts again
/// empty.
const CAPACITY: usize = 100_000;

/// What a lookup asked.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Key {
    /// An order by the id its shopper was given, asked by that shopper.
    Id { order: i64, owner: i64 },
    /// A shopper's order of a sale (`…/orders/mine`).
    Mine { voucher: i64, user: i64 },
}

/// Where the board was when a lookup began: what it reads may be kept only if no
/// change of it was announced since.
#[derive(Clone, Copy, Debug)]
pub struct Ticket {
    epoch: u64,
    tick: u64,
}

#[derive(Default)]
struct Inner {
    /// Bumped whenever the board is emptied: tickets of before are void.
    epoch: u64,
    answers: HashMap<Key, (u64, Order)>,
    /// The tick of the latest announcement naming an order id.
    ids: HashMap<i64, u64>,
    /// The tick of the latest announcement naming a shopper's order of a sale.
    mine: HashMap<(i64, i64), u64>,
}

impl Inner {
    fn changed_at(&self, key: &Key) -> u64 {
        match key {
            Key::Id { order, .. } => self.ids.get(order).copied().unwrap_or(0),
            Key::Mine { voucher, user } => self.mine.get(&(*voucher, *user)).copied().unwrap_or(0),
        }
    }

    /// What a lookup would read now of the order `r` announced: its owner's answer
    /// by its id (an order stored under its own id: one stored under a fresh id
    /// shares the id its shopper knows with another row, which the lookup's
    /// choice between them needs), and its shopper's order of the sale while it is
    /// live. Kept at the announcement's tick, so the next poll needs no query.
    fn answer(&mut self, r: &Changed, tick: u64) {
        let Some(o) = &r.order else { return };
        if self.answers.len() + 2 > CAPACITY {
            return;
        }
        if r.issued_id.is_none() {
            let key = Key::Id {
                order: r.id,
                owner: r.user,
            };
            self.answers.insert(key, (tick, o.clone()));
        }
        if ["created", "paid"].contains(&o.status.as_str()) {
            let key = Key::Mine {
                voucher: r.voucher,
                user: r.user,
            };
            self.answers.insert(key, (tick, o.clone()));
        }
    }

    fn empty(&mut self) {
        self.epoch += 1;
        self.answers.clear();
        self.ids.clear();
        self.mine.clear();
    }
}

/// The board (see the module above).
pub struct Board {
    inner: Mutex<Inner>,
    tick: AtomicU64,
    /// Whether every announcement is heard now.
    live: AtomicBool,
    /// Long polls waiting, by order id (with how many wait on it).
    waiters: Mutex<HashMap<i64, (Arc<Notify>, usize)>>,
    /// How many long polls may be held at once (`SECKILL_MAX_HELD_WAITS`).
    pub held: Arc<tokio::sync::Semaphore>,
    /// Cancelled when the process stops: every held wait answers at once.
    pub closing: CancellationToken,
    /// When the board began (what [`Board::heard`] counts from).
    born: Instant,
    /// When the last ping heard was sent, in ms since `born`: every change
    /// committed before then was heard (Postgres delivers a listener's
    /// notifications in commit order).
    heard_ms: AtomicU64,
    /// Lookups of long polls under way at once, at most [`LOOKS`].
    pub looks: Arc<tokio::sync::Semaphore>,
}

/// The oldest the board may be: it serves nothing once the last ping it heard
/// was sent longer ago.
pub const MAX_STALE: Duration = Duration::from_millis(1000);
/// Lookups long polls make at once (each woken poll looks once): 10,000 polls
/// woken together queue for them instead of taking the pools.
const LOOKS: usize = 64;

impl Board {
    pub fn new(max_held: usize) -> Self {
        Self {
            inner: Mutex::default(),
            tick: AtomicU64::new(0),
            live: AtomicBool::new(false),
            waiters: Mutex::default(),
            held: Arc::new(tokio::sync::Semaphore::new(max_held)),
            closing: CancellationToken::new(),
            born: Instant::now(),
            heard_ms: AtomicU64::new(0),
            looks: Arc::new(tokio::sync::Semaphore::new(LOOKS)),
        }
    }

    /// Whether the board has heard every announcement up to at most
    /// [`MAX_STALE`] ago (if not it serves nothing).
    pub fn is_live(&self) -> bool {
        let now = self.born.elapsed().as_millis() as u64;
        self.live.load(Ordering::Acquire)
            && now.saturating_sub(self.heard_ms.load(Ordering::Acquire)) <= MAX_STALE.as_millis() as u64
    }

    /// A ping sent at `sent` was heard back.
    pub fn heard(&self, sent: Instant) {
        let ms = sent.saturating_duration_since(self.born).as_millis() as u64;
        self.heard_ms.fetch_max(ms, Ordering::AcqRel);
    }

    /// The answer kept for `key`, if it still stands.
    pub fn get(&self, key: &Key) -> Option<Order> {
        if !self.is_live() {
            return None;
        }
        let inner = self.inner.lock().expect("board poisoned");
        let (read_at, order) = inner.answers.get(key)?;
        (inner.changed_at(key) <= *read_at).then(|| order.clone())
    }

    /// Taken before a lookup reads; None while the board is not live.
    pub fn ticket(&self) -> Option<Ticket> {
        if !self.is_live() {
            return None;
        }
        let epoch = self.inner.lock().expect("board poisoned").epoch;
        Some(Ticket {
            epoch,
            tick: self.tick.load(Ordering::Acquire),
        })
    }

    /// Keeps `order`, read for `key` after `ticket` was taken, unless a change of
    /// it was announced since (or the board was emptied).
    pub fn keep(&self, ticket: Option<Ticket>, key: Key, order: &Order) {
        let Some(t) = ticket else { return };
        let mut inner = self.inner.lock().expect("board poisoned");
        if inner.epoch != t.epoch || inner.changed_at(&key) > t.tick {
            return;
        }
        if inner.answers.len() >= CAPACITY {
            inner.empty();
            return;
        }
        inner.answers.insert(key, (t.tick, order.clone()));
    }

    /// An announcement heard: what it names is replaced or forgotten, and the
    /// long polls of those orders look again.
    pub fn changed(&self, rows: &[Changed]) {
        let tick = self.tick.fetch_add(1, Ordering::AcqRel) + 1;
        {
            let mut inner = self.inner.lock().expect("board poisoned");
            for r in rows {
                inner.ids.insert(r.id, tick);
                if let Some(issued) = r.issued_id {
                    inner.ids.insert(issued, tick);
                }
                inner.mine.insert((r.voucher, r.user), tick);
                inner.answer(r, tick);
            }
            if inner.ids.len() + inner.mine.len() > 2 * CAPACITY {
                inner.empty();
            }
        }
        let waiters = self.waiters.lock().expect("waiters poisoned");
        for r in rows {
            for id in std::iter::once(r.id).chain(r.issued_id) {
                if let Some((n, _)) = waiters.get(&id) {
                    n.notify_waiters();
                }
            }
        }
    }

    /// Serves again (`true`: every announcement is heard from now on) or stops
    /// serving; either way what it kept goes, and every long poll looks again.
    pub(super) fn set_live(&self, live: bool) {
        // Emptied before it serves: what was announced while it did not hear is unknown.
        self.inner.lock().expect("board poisoned").empty();
        if live {
            // Listening from now on: nothing committed after now goes unheard.
            self.heard(Instant::now());
        }
        self.live.store(live, Ordering::Release);
        // Long polls look again once the board hears (not when it stops: each
        // would then read Postgres at once, all together).
        if live {
            self.wake_all();
        }
    }

    fn wake_all(&self) {
        for (n, _) in self.waiters.lock().expect("waiters poisoned").values() {
            n.notify_waiters();
        }
    }

    /// Registers a long poll of `order` (see [`super::waits::Waiter`]): the
    /// notification every announcement naming the order (and every emptying of
    /// the board) wakes, until [`Board::unregister`].
    pub fn register(&self, order: i64) -> Arc<Notify> {
        let mut w = self.waiters.lock().expect("waiters poisoned");
        let e = w.entry(order).or_insert_with(|| (Arc::new(Notify::new()), 0));
        e.1 += 1;
        e.0.clone()
    }

    /// A long poll of `order` is done.
    pub fn unregister(&self, order: i64) {
        let mut w = self.waiters.lock().expect("waiters poisoned");
        if let Some(e) = w.get_mut(&order) {
            e.1 -= 1;
            if e.1 == 0 {
                w.remove(&order);
            }
        }
    }

    /// How many long polls wait now.
    pub fn waiting(&self) -> usize {
        self.waiters
            .lock()
            .expect("waiters poisoned")
            .values()
            .map(|(_, n)| n)
            .sum()
    }
}

#[cfg(test)]
mod tests;
