//! `seckill raffle verify`: recomputes a raffle's draw from the public endpoints
//! alone (`GET .../raffle` and the pages of `GET .../raffle/entries`) by the
//! published rule ([`super::rule::RULE`]), and says whether the published winners
//! are the ones it gives. It trusts nothing of the service's but what it checks.
use super::beacon::Chain;
use super::rule::{list_hash, score_prefix, winners};
use super::signing::sha256_hex;
use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;
use std::collections::BTreeSet;

/// What a matching draw showed.
#[derive(Debug)]
pub struct Verified {
    pub entries: usize,
    pub winners: usize,
    /// The chain and round, if the raffle drew with a beacon.
    pub beacon: Option<(Chain, i64)>,
    /// The round named at creation, if the close moved it.
    pub named_round: Option<i64>,
}

impl std::fmt::Display for Verified {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the draw matches the rule: {} entries, {} winners",
            self.entries, self.winners
        )?;
        match &self.beacon {
            Some((chain, round)) if chain.is_quicknet() => {
                write!(f, "; randomness from the League of Entropy's quicknet, round {round}")
            }
            Some((chain, round)) => write!(
                f,
                "; randomness from round {round} of a chain that is not quicknet (public key {}): the draw is only \
                 as fair as whoever holds that chain's key",
                chain.public_key
            ),
            None => write!(f, "; drawn before beacons, by the seed alone"),
        }?;
        match self.named_round {
            Some(named) => write!(
                f,
                " (the sale named round {named}; its entries closed too late for it, and it moved to the first \
                 round {} s after the close)",
                super::beacon::MARGIN_SECS
            ),
            None => Ok(()),
        }
    }
}

async fn get(http: &reqwest::Client, url: &str) -> Result<Value> {
    let resp = http.get(url).send().await.with_context(|| format!("GET {url}"))?;
    let status = resp.status();
    let bytes = resp.bytes().await?;
    ensure!(
        status.is_success(),
        "GET {url}: {status} {}",
        String::from_utf8_lossy(&bytes)
    );
    serde_json::from_slice(&bytes).with_context(|| format!("GET {url}: not JSON"))
}

fn text<'a>(v: &'a Value, field: &str) -> Result<&'a str> {
    v[field]
        .as_str()
        .with_context(|| format!("the summary has no `{field}`: {v}"))
}

/// Every published entry and whether it won.
async fn entries(http: &reqwest::Client, base: &str, voucher: i64) -> Result<Vec<(String, bool)>> {
    let mut all = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let q = after.as_deref().map(|a| format!("&after={a}")).unwrap_or_default();
        let page = get(
            http,
            &format!("{base}/api/v1/vouchers/{voucher}/raffle/entries?limit=1000{q}"),
        )
        .await?;
        for e in page["items"].as_array().context("a page without items")? {
            let entry = e["entry"].as_str().context("an entry without its name")?.to_owned();
            let won = e["won"].as_bool().context("an entry without `won` after the draw")?;
            all.push((entry, won));
        }
        match page["next_after"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => return Ok(all),
        }
    }
}

/// The beacon round a drawn raffle's summary `s` names, checked: published after
/// its draw_at and after its entries closed, its signature the chain's, its
/// randomness the signature's hash. None: a raffle drawn without a beacon.
fn checked_beacon(s: &Value) -> Result<Option<(Chain, i64, String)>> {
    if s["beacon"].is_null() {
        return Ok(None);
    }
    let b = &s["beacon"];
    let chain: Chain = serde_json::from_value(b.clone()).context("the beacon's chain")?;
    let round = b["round"].as_i64().context("the beacon's round")?;
    let draw_at: chrono::DateTime<chrono::Utc> = text(s, "draw_at")?.parse().context("draw_at")?;
    ensure!(
        chain.round_at(round) > draw_at,
        "round {round} was published at {}, not after draw_at {draw_at}",
        chain.round_at(round)
    );
    // The list was fixed before the round was published.
    let closed_at: chrono::DateTime<chrono::Utc> = text(s, "closed_at")?.parse().context("closed_at")?;
    ensure!(
        closed_at < chain.round_at(round),
        "the entries closed at {closed_at}, not before round {round} was published ({})",
        chain.round_at(round)
    );
    let randomness = chain
        .verify(round, text(s, "signature")?)
        .map_err(|e| anyhow::anyhow!("the published signature: {e}"))?;
    ensure!(
        randomness == text(s, "randomness")?,
        "the published randomness is not sha256 of the signature"
    );
    Ok(Some((chain, round, randomness)))
}

/// Recomputes raffle `voucher`'s draw from the API at `base`: Ok if the
/// published winners are the rule's, an error saying what differs if not.
pub async fn verify(base: &str, voucher: i64) -> Result<Verified> {
    let base = base.trim_end_matches('/');
    let http = reqwest::Client::new();
    let s = get(&http, &format!("{base}/api/v1/vouchers/{voucher}/raffle")).await?;
    if s["status"] != "drawn" {
        bail!("raffle {voucher} is not drawn (status {})", s["status"]);
    }
    let seed = text(&s, "seed")?;
    let seed_bytes = hex::decode(seed).context("the seed is not hex")?;
    ensure!(
        sha256_hex(&seed_bytes) == text(&s, "commitment")?,
        "the seed is not the one committed to at the sale's creation"
    );
    let beacon = checked_beacon(&s)?;
    let published = entries(&http, base, voucher).await?;
    let names: Vec<String> = published.iter().map(|(e, _)| e.clone()).collect();
    ensure!(
        names.iter().collect::<BTreeSet<_>>().len() == names.len(),
        "an entry is listed twice"
    );
    ensure!(
        s["entries"].as_u64() == Some(names.len() as u64),
        "the summary counts {} entries, the list has {}",
        s["entries"],
        names.len()
    );
    let list = list_hash(&names);
    ensure!(
        list == text(&s, "list_hash")?,
        "the entry list does not hash to the list_hash fixed at the close"
    );
    let k = s["winners"].as_u64().context("the summary has no `winners`")? as usize;
    ensure!(k <= names.len(), "{k} winners of {} entries", names.len());
    let prefix = score_prefix(beacon.as_ref().map(|(_, _, r)| r.as_str()), seed, &list);
    let rule: BTreeSet<String> = winners(&prefix, &names, k).into_iter().collect();
    let shown: BTreeSet<String> = published.iter().filter(|(_, w)| *w).map(|(e, _)| e.clone()).collect();
    if rule != shown {
        let missing: Vec<&String> = rule.difference(&shown).take(5).collect();
        let extra: Vec<&String> = shown.difference(&rule).take(5).collect();
        bail!(
            "the published winners are not the rule's: {} should have won and are not shown as winners \
             (first: {missing:?}); {} are shown as winners and should not be (first: {extra:?})",
            rule.difference(&shown).count(),
            shown.difference(&rule).count()
        );
    }
    Ok(Verified {
        entries: names.len(),
        winners: k,
        beacon: beacon.map(|(c, r, _)| (c, r)),
        named_round: s["beacon_named_round"].as_i64(),
    })
}
