//! The benchmark's flags, and the scenarios and sides they select.

use std::time::Duration;

use anyhow::{bail, Context as _};
use serde::{Deserialize, Serialize};

/// One key space with its L1 bound, read-only or with writes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Scenario {
    /// Its label in the report (`fit-L1 read`, `20x-L1 write`, ...).
    pub(crate) name: String,
    /// Users in the key space (ids 1..=keys; Zipf rank r reads id r).
    pub(crate) keys: u64,
    /// corral's L1 bound, in entries.
    pub(crate) l1: u64,
    /// The share of requests that update a row and invalidate its key.
    pub(crate) writes: f64,
    /// Requests served (over all replicas) before the measured period.
    pub(crate) warmup: u64,
    /// Requests served (over all replicas) in the measured period.
    pub(crate) requests: u64,
}

/// Which implementation serves the requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Side {
    /// `Cache::get_or_fill` with corral's defaults on a `RedisStore`.
    Corral,
    /// Plain redis-rs: `GET`; on a miss, the query and `SET EX`.
    CacheAside,
}

impl Side {
    /// Its label in the report.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Side::Corral => "corral",
            Side::CacheAside => "cache-aside",
        }
    }
}

/// The flags (see the usage in `main.rs`).
#[derive(Debug, Clone)]
pub(crate) struct Args {
    pub(crate) replicas: usize,
    pub(crate) concurrency: usize,
    /// Requests per second over all replicas, started on a schedule
    /// whether or not earlier ones finished (open loop); `None`: a closed
    /// loop of `concurrency` tasks per replica.
    pub(crate) rate: Option<f64>,
    /// The longest a measured period may last (then its replicas stop
    /// short of their requests).
    pub(crate) cap: Duration,
    pub(crate) ttl: Duration,
    pub(crate) pool: usize,
    pub(crate) redis: Option<String>,
    pub(crate) json: Option<String>,
    pub(crate) scenarios: Vec<Scenario>,
    pub(crate) sides: Vec<Side>,
}

/// The flags as given, before the scenarios are made of them.
struct Raw {
    warmup: Option<u64>,
    requests: Option<u64>,
    keys: Option<u64>,
    l1: Option<u64>,
    writes: f64,
    spaces: Vec<String>,
    mixes: Vec<String>,
}

const USAGE: &str = "flags: --replicas N --concurrency C --rate REQUESTS_PER_SEC --warmup REQUESTS --requests REQUESTS \
     --cap SECS --ttl SECS --pool N --redis URL --json FILE --space fit,20x --mix read,write --writes FRACTION \
     --keys N --l1 N --sides corral,aside";

impl Args {
    /// Parses `std::env::args()` (after the program name).
    pub(crate) fn parse(flags: impl Iterator<Item = String>) -> anyhow::Result<Self> {
        let mut args = Args {
            replicas: 3,
            concurrency: 16,
            rate: None,
            cap: Duration::from_secs(60),
            ttl: Duration::from_secs(60),
            pool: 4,
            redis: None,
            json: None,
            scenarios: Vec::new(),
            sides: vec![Side::Corral, Side::CacheAside],
        };
        let mut raw = Raw {
            warmup: None,
            requests: None,
            keys: None,
            l1: None,
            writes: 0.01,
            spaces: vec!["fit".into(), "20x".into()],
            mixes: vec!["read".into(), "write".into()],
        };
        let mut flags = flags;
        while let Some(flag) = flags.next() {
            if flag == "--help" || flag == "-h" {
                bail!("{USAGE}");
            }
            let value = flags
                .next()
                .with_context(|| format!("{flag} needs a value"))?;
            args.set(&mut raw, &flag, &value)
                .with_context(|| format!("{flag} {value}"))?;
        }
        args.scenarios = raw.scenarios()?;
        anyhow::ensure!(args.replicas > 0 && args.concurrency > 0 && args.pool > 0);
        anyhow::ensure!(!args.cap.is_zero(), "--cap must be more than 0");
        Ok(args)
    }

    fn set(&mut self, raw: &mut Raw, flag: &str, value: &str) -> anyhow::Result<()> {
        let secs = |v: &str| v.parse::<f64>().map(Duration::from_secs_f64);
        let list = |v: &str| v.split(',').map(str::to_owned).collect::<Vec<_>>();
        match flag {
            "--replicas" => self.replicas = value.parse()?,
            "--concurrency" => self.concurrency = value.parse()?,
            "--rate" => {
                let rate: f64 = value.parse()?;
                anyhow::ensure!(rate > 0.0 && rate.is_finite(), "--rate must be more than 0");
                self.rate = Some(rate);
            }
            "--warmup" => raw.warmup = Some(value.parse()?),
            "--requests" => raw.requests = Some(value.parse()?),
            "--cap" => self.cap = secs(value)?,
            "--ttl" => self.ttl = secs(value)?,
            "--pool" => self.pool = value.parse()?,
            "--redis" => self.redis = Some(value.to_owned()),
            "--json" => self.json = Some(value.to_owned()),
            "--keys" => raw.keys = Some(value.parse()?),
            "--l1" => raw.l1 = Some(value.parse()?),
            "--writes" => raw.writes = value.parse()?,
            "--space" => raw.spaces = list(value),
            "--mix" => raw.mixes = list(value),
            "--sides" => {
                let sides = list(value).into_iter().map(|s| match s.as_str() {
                    "corral" => Ok(Side::Corral),
                    "aside" | "cache-aside" => Ok(Side::CacheAside),
                    other => Err(anyhow::anyhow!("unknown side {other}")),
                });
                self.sides = sides.collect::<Result<_, _>>()?;
            }
            _ => bail!("unknown flag; {USAGE}"),
        }
        Ok(())
    }

    /// The most users any scenario reads: the rows to seed.
    pub(crate) fn rows(&self) -> u64 {
        self.scenarios.iter().map(|s| s.keys).max().unwrap_or(0)
    }
}

impl Raw {
    /// The key spaces (`fit`: 5,000 users, L1 10,000; `20x`: 100,000
    /// users, L1 5,000; or one of `--keys` and `--l1`), each with every
    /// mix asked for.
    fn scenarios(&self) -> anyhow::Result<Vec<Scenario>> {
        anyhow::ensure!((0.0..=1.0).contains(&self.writes), "--writes is a fraction");
        let spaces: Vec<Space> = match (self.keys, self.l1) {
            (None, None) => self
                .spaces
                .iter()
                .map(|s| space(s))
                .collect::<Result<_, _>>()?,
            (keys, l1) => {
                let (keys, l1) = (keys.unwrap_or(100_000), l1.unwrap_or(10_000));
                let label = format!("{keys} keys, L1 {l1}");
                vec![(label, keys, l1, 5 * keys, 10 * keys)]
            }
        };
        let mut scenarios = Vec::new();
        for (label, keys, l1, warmup, requests) in spaces {
            let warmup = self.warmup.unwrap_or(warmup);
            let requests = self.requests.unwrap_or(requests);
            anyhow::ensure!(keys > 0 && l1 > 0, "--keys and --l1 must be more than 0");
            for mix in &self.mixes {
                let writes = match mix.as_str() {
                    "read" => 0.0,
                    "write" => self.writes,
                    other => bail!("unknown mix {other} (read, write)"),
                };
                let name = format!("{label}, {mix}");
                scenarios.push(Scenario {
                    name,
                    keys,
                    l1,
                    writes,
                    warmup,
                    requests,
                });
            }
        }
        Ok(scenarios)
    }
}

/// A key space: its label, users, L1 bound, and the requests of its
/// warm-up and of its measured period.
type Space = (String, u64, u64, u64, u64);

/// A named key space.
fn space(name: &str) -> anyhow::Result<Space> {
    match name {
        "fit" => Ok((
            "fits the L1 (5k keys, L1 10k)".into(),
            5_000,
            10_000,
            200_000,
            2_000_000,
        )),
        "20x" => Ok((
            "20x the L1 (100k keys, L1 5k)".into(),
            100_000,
            5_000,
            500_000,
            1_000_000,
        )),
        other => bail!("unknown key space {other} (fit, 20x)"),
    }
}
