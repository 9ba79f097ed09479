//! `seckill-bench lock`: the distributed lock's costs against the configured Redis.
use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use seckill::config::Settings;
use std::time::{Duration, Instant};

type Hist = Histogram<u64>;

/// `seckill bench-lock`: the distributed lock's costs against the configured Redis.
#[derive(clap::Args, Debug, Clone)]
pub struct LockArgs {
    /// Acquire+release rounds per measurement.
    #[arg(long, default_value_t = 5000)]
    pub iterations: u32,
    /// Tasks for the parallel uncontended measurement (each on its own lock).
    #[arg(long, default_value_t = 16)]
    pub tasks: u32,
    /// Hand-overs to time between two waiters.
    #[arg(long, default_value_t = 500)]
    pub handovers: u32,
}

pub async fn run_lock(args: LockArgs, settings: &Settings) -> Result<()> {
    use seckill::locks::LockService;
    let redis = seckill::redis_conn::Redis::new(
        settings.services.redis_url.expose(),
        settings.services.redis_cluster,
        settings.services.dependency_timeout,
    )?;
    let ns = format!("{}-lockbench-{}", settings.services.namespace, std::process::id());
    let stop = tokio_util::sync::CancellationToken::new();
    let locks = LockService::start(
        redis.clone(),
        seckill::keys::Keys::new(&ns),
        "bench",
        settings.guards.lock_lease,
        stop.clone(),
    );
    let lease = Some(Duration::from_secs(10));

    // One task, one lock: the latency-bound rate (two script calls per round).
    let owner = locks.owner();
    let t = Instant::now();
    for _ in 0..args.iterations {
        let g = owner
            .try_lock("solo", Duration::ZERO, lease)
            .await?
            .context("uncontended lock was busy")?;
        g.release().await?.map_err(|e| anyhow::anyhow!(e))?;
    }
    let solo = args.iterations as f64 / t.elapsed().as_secs_f64();
    println!("uncontended acquire+release, 1 task: {solo:.0} per second");

    // Many tasks, each its own lock: the throughput over one multiplexed connection.
    let t = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..args.tasks {
        let owner = locks.owner();
        let n = args.iterations;
        tasks.push(tokio::spawn(async move {
            let name = format!("par-{i}");
            for _ in 0..n {
                let g = owner
                    .try_lock(&name, Duration::ZERO, lease)
                    .await?
                    .context("uncontended lock was busy")?;
                g.release().await?.map_err(|e| anyhow::anyhow!(e))?;
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let par = (args.iterations * args.tasks) as f64 / t.elapsed().as_secs_f64();
    println!(
        "uncontended acquire+release, {} tasks on distinct locks: {par:.0} per second",
        args.tasks
    );

    // Hand-over: the holder releases, the waiter (already waiting) acquires.
    let mut hist = Hist::new(3)?;
    let (a, b) = (locks.owner(), locks.owner());
    for _ in 0..args.handovers {
        let held = a
            .try_lock("handover", Duration::ZERO, lease)
            .await?
            .context("hand-over lock busy")?;
        let waiter = {
            let b = b.clone();
            tokio::spawn(async move {
                let g = b
                    .try_lock("handover", Duration::from_secs(5), lease)
                    .await?
                    .context("waiter timed out")?;
                let at = Instant::now();
                g.release().await?.map_err(|e| anyhow::anyhow!(e))?;
                anyhow::Ok(at)
            })
        };
        // Let the waiter find the lock busy and start waiting.
        tokio::time::sleep(Duration::from_millis(2)).await;
        let released = Instant::now();
        held.release().await?.map_err(|e| anyhow::anyhow!(e))?;
        let acquired = waiter.await??;
        hist.record((acquired - released).as_micros().max(1) as u64).ok();
    }
    println!(
        "hand-over latency between two waiters ({} hand-overs): p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        args.handovers,
        hist.value_at_quantile(0.5) as f64 / 1000.0,
        hist.value_at_quantile(0.99) as f64 / 1000.0,
        hist.max() as f64 / 1000.0
    );
    stop.cancel();
    let mut conn = redis.conn().await?;
    let keys: Vec<String> = redis::cmd("KEYS").arg(format!("{ns}:*")).query_async(&mut conn).await?;
    if !keys.is_empty() {
        let _: () = redis::cmd("DEL").arg(keys).query_async(&mut conn).await?;
    }
    Ok(())
}
