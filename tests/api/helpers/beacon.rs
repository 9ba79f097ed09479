//! A randomness beacon of the tests' own: a BLS12-381 key that signs rounds as
//! drand's quicknet does (a signature on G1 of sha256(round, big-endian), hashed
//! to the curve by RFC 9380), so that a raffle can name it and a test can publish
//! its rounds. Also used by `seckill-bench raffle` (included by path).
use bls12_381::hash_to_curve::{ExpandMsgXmd, HashToCurve};
use bls12_381::{G1Affine, G1Projective, G2Affine, G2Projective, Scalar};
use serde_json::{json, Value};

const DST: &[u8] = b"BLS_SIG_BLS12381G1_XMD:SHA-256_SSWU_RO_NUL_";

/// A chain: its secret key, its public key, its genesis and period.
pub struct TestChain {
    secret: Scalar,
    pub public_key: String,
    pub genesis_time: i64,
    pub period: i64,
}

impl TestChain {
    /// A new key; round 1 at `genesis_time`, one round a `period` seconds.
    pub fn new(genesis_time: i64, period: i64) -> Self {
        let wide: [u8; 64] = std::array::from_fn(|_| rand::random::<u8>());
        let secret = Scalar::from_bytes_wide(&wide);
        let public = G2Affine::from(G2Projective::generator() * secret);
        Self {
            secret,
            public_key: hex::encode(public.to_compressed()),
            genesis_time,
            period,
        }
    }

    /// A chain whose rounds come every second, from a minute ago.
    pub fn fast() -> Self {
        Self::new(chrono::Utc::now().timestamp() - 60, 1)
    }

    /// The round's signature, in hex.
    pub fn sign(&self, round: i64) -> String {
        use sha2_09::Digest;
        let msg = sha2_09::Sha256::digest(&(round as u64).to_be_bytes());
        let point = <G1Projective as HashToCurve<ExpandMsgXmd<sha2_09::Sha256>>>::hash_to_curve(msg.as_slice(), DST);
        hex::encode(G1Affine::from(point * self.secret).to_compressed())
    }

    /// The `beacon` of a sale's body: this chain, and `round` if given.
    pub fn field(&self, round: Option<i64>) -> Value {
        let mut b = json!({"public_key": self.public_key, "genesis_time": self.genesis_time, "period": self.period});
        if let Some(r) = round {
            b["round"] = json!(r);
        }
        b
    }

    /// When round `round` is published.
    pub fn round_at(&self, round: i64) -> i64 {
        self.genesis_time + (round - 1) * self.period
    }
}

/// Publishes raffle `v`'s round as the beacon would, once its entries closed,
/// and waits until it is drawn: the raffle's summary then (`base`: the API's
/// address).
pub async fn publish_round(base: &str, v: i64, chain: &TestChain) -> Value {
    let client = reqwest::Client::new();
    let summary_url = format!("{base}/api/v1/vouchers/{v}/raffle");
    let summary = || async {
        let resp = client.get(&summary_url).send().await.expect("the raffle read");
        assert_eq!(resp.status(), reqwest::StatusCode::OK);
        resp.json::<Value>().await.expect("a summary")
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut s = summary().await;
    while s["status"] == "open" {
        assert!(std::time::Instant::now() < deadline, "raffle {v} still open: {s}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        s = summary().await;
    }
    let round = s["beacon"]["round"].as_i64().expect("the raffle's round");
    let resp = client
        .post(format!("{base}/api/v1/vouchers/{v}/raffle/beacon"))
        .json(&json!({"round": round, "signature": chain.sign(round)}))
        .send()
        .await
        .expect("the beacon sent");
    let status = resp.status();
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    assert_eq!(status, reqwest::StatusCode::ACCEPTED, "{body}");
    while s["status"] != "drawn" {
        assert!(std::time::Instant::now() < deadline, "raffle {v} not drawn: {s}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        s = summary().await;
    }
    s
}
