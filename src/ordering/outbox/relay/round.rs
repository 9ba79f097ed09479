//! One round of a relay ([`Relay::step`]): read the outboxes, sort what was read
//! into orders (with where each came from), entries to acknowledge and entries
//! this binary cannot read, publish, acknowledge.
use super::{Origin, Read, Relay};
use crate::ordering::model::OrderMsg;
use anyhow::Result;
use lapin::Channel;
use redis::streams::StreamKey;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// What one read of the outboxes brought.
#[derive(Default)]
struct Reading {
    /// The orders read, each with its shard and outbox entry.
    orders: Vec<(OrderMsg, Origin)>,
    /// How many entries were read (those it could read).
    entries: usize,
    /// The entries to acknowledge once their orders are published, per stream.
    done: HashMap<String, Vec<String>>,
    /// The latest point read per shard (the entry of the highest sequence): checked
    /// and recorded with the intents (see `super::points`).
    seen: HashMap<String, crate::recovery::Point>,
    /// The entries this binary cannot read, per stream.
    unreadable: HashMap<String, Vec<String>>,
}

impl Relay {
    /// One round: read about `batch` orders' worth of entries per outbox
    /// ([`Relay::entries_per_read`]), record them as about to be published
    /// ([`super::intent`]), publish them in messages of `batch` to `2 × batch − 1`
    /// orders (`messages`; one message if the round read fewer), wait for
    /// the broker's confirms, then acknowledge the entries and drop them from the
    /// outbox (`lua/outbox_ack.lua`). Returns how many orders were published.
    pub async fn step(&self, channel: &Channel, read: Read) -> Result<usize> {
        let held = self.held_due();
        let streams: Vec<String> = self.outboxes().await;
        if streams.is_empty() && held.is_empty() {
            // A round that reads nothing leaves a pending re-read for the next one.
            if read == Read::OwnPending {
                self.memory.left_pending.store(true, Ordering::Relaxed);
            }
            return Ok(0);
        }
        // Any server, whatever it went through: an outbox entry is an order Redis
        // admitted, to be published; a shard that went back in time is the repair's
        // business, which counts what this relay records an intent for.
        let mut conn = self.redis.conn().await?;
        let reply = match streams.is_empty() {
            true => None,
            false => self.read(&mut conn, &streams, read).await?,
        };
        let reading = self.sort(reply.map(|r| r.keys).unwrap_or_default());
        if !reading.unreadable.is_empty() {
            self.park_unreadable(&mut conn, &reading.unreadable).await;
        }
        if reading.entries > 0 {
            self.memory
                .per_entry
                .store(reading.orders.len().div_ceil(reading.entries), Ordering::Relaxed);
        }
        let Reading {
            mut orders, done, seen, ..
        } = reading;
        orders.extend(held);
        if orders.is_empty() {
            if !done.is_empty() {
                self.acknowledge(&conn, &done).await?;
            }
            return Ok(0);
        }
        // Orders not of their sale's generation (read before a repair of it): see
        // `read_before_repair`. A round may read more than `batch` orders (a read asks each
        // outbox for about `batch` orders' worth of entries, by the last round's
        // orders per entry, and entries differ in size). If a later message cannot
        // be published, the round's entries stay pending and are published again,
        // the earlier messages' orders too (the worker stores each order once).
        let points = self.checked(&mut conn, seen).await;
        let Some(published) = self.publish_read(&mut conn, channel, orders, &points).await? else {
            self.memory.left_pending.store(true, Ordering::Relaxed);
            return Ok(0);
        };
        self.recorded(&points);
        if !done.is_empty() {
            self.acknowledge(&conn, &done).await?;
        }
        Ok(published)
    }

    /// Orders held from an earlier round (see `read_before_repair`), settled again once a
    /// second: until then they take no part (and hold no round up).
    fn held_due(&self) -> Vec<(OrderMsg, Origin)> {
        let mut last = self.held.tried.lock().expect("held poisoned");
        let due = last.is_none_or(|t| t.elapsed() >= crate::recovery::desk::REFRESH_EVERY);
        let held = self.held.orders.lock().expect("held poisoned").clone();
        if due && !held.is_empty() {
            *last = Some(Instant::now());
            held
        } else {
            Vec::new()
        }
    }

    /// Sorts the entries a read brought into orders, entries to acknowledge and
    /// entries this binary cannot read.
    fn sort(&self, streams: Vec<StreamKey>) -> Reading {
        let mut reading = Reading::default();
        for stream in streams {
            let tag = self.keys.tag_of(&stream.key).unwrap_or_default().to_owned();
            for entry in stream.ids {
                match crate::ordering::outbox::entry::parse(&entry, self.recovery.formats.reads()) {
                    Some(e) => {
                        reading.entries += 1;
                        if let Some(p) = e.point() {
                            let top = reading.seen.entry(tag.clone()).or_insert(p);
                            if p.seq > top.seq {
                                *top = p;
                            }
                        }
                        let origin = Origin {
                            tag: tag.clone(),
                            entry: Some((stream.key.clone(), entry.id.clone())),
                        };
                        reading.orders.extend(e.orders.into_iter().map(|o| (o, origin.clone())));
                    }
                    // An entry this binary cannot read (a newer format during a
                    // rolling upgrade, or one reserve.lua did not write) may hold
                    // acknowledged orders: it is never acknowledged unread. It stays
                    // pending, parked (see `park_unreadable`), so that a relay that
                    // reads it claims it after the claim timeout; the other entries
                    // go on. Counted and logged once per entry by this process.
                    None => {
                        self.unreadable_met(&stream.key, &entry.id);
                        reading.unreadable.entry(stream.key.clone()).or_default().push(entry.id);
                        continue;
                    }
                }
                reading.done.entry(stream.key.clone()).or_default().push(entry.id);
            }
        }
        reading
    }
}
