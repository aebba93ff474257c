//! From templates to jobs. Each template the pool adopts opens a [`Generation`]; the jobs of a
//! generation differ only in their coinbase payout (one job in pool mode; one per paid address
//! in solo mode, built the first time a miner paying to it asks).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use events::{fingerprint, Fingerprint};
use primitives::bitcoin::{Amount, ScriptBuf};
use primitives::coinbase::CoinbaseError;
use primitives::{coinbase_merkle_branch, CoinbaseSpec, Hash256, Payout};

use crate::job::Job;
use crate::template::{TdpTemplate, Template};
use crate::Timestamp;

/// How the pool builds coinbases.
#[derive(Clone, Debug)]
pub struct JobConfig {
    /// Pushed after the BIP34 height in every coinbase's scriptSig (the pool's signature).
    pub coinbase_tag: Vec<u8>,
    /// Extranonce bytes in the coinbase: the connection's prefix plus the miner's part.
    pub extranonce_len: usize,
}

impl Default for JobConfig {
    fn default() -> Self {
        JobConfig {
            coinbase_tag: b"/stratumlab pool (solo+pps lab)/".to_vec(),
            extranonce_len: 8,
        }
    }
}

/// Keeps the current generation and numbers jobs. Sans-IO: the caller feeds templates.
pub struct JobBook {
    config: Arc<JobConfig>,
    ids: Arc<AtomicU64>,
    generation: u64,
    epoch: u64,
    current: Option<Arc<Generation>>,
}

impl JobBook {
    /// A book with no template yet.
    pub fn new(config: JobConfig) -> Self {
        JobBook {
            config: Arc::new(config),
            ids: Arc::new(AtomicU64::new(1)),
            generation: 0,
            epoch: 0,
            current: None,
        }
    }

    /// The latest generation; `None` before the first template.
    pub fn current(&self) -> Option<&Arc<Generation>> {
        self.current.as_ref()
    }

    /// Adopts a template. Every template opens a generation, even one equal to the last: the
    /// periodic refresh doubles as the liveness signal miners expect from a pool.
    pub fn handle_template(&mut self, template: Arc<Template>, now: Timestamp) -> Arc<Generation> {
        self.handle_work(template, None, now)
    }

    /// Adopts a template from a Template Provider: its jobs use the provider's merkle path and
    /// required coinbase outputs (see [`TdpTemplate`]).
    pub fn handle_tdp_template(
        &mut self,
        template: Arc<Template>,
        tdp: Arc<TdpTemplate>,
        now: Timestamp,
    ) -> Arc<Generation> {
        self.handle_work(template, Some(tdp), now)
    }

    fn handle_work(
        &mut self,
        template: Arc<Template>,
        tdp: Option<Arc<TdpTemplate>>,
        now: Timestamp,
    ) -> Arc<Generation> {
        let clean = self
            .current
            .as_ref()
            .is_none_or(|g| g.template.prev_hash != template.prev_hash);
        if clean {
            self.epoch += 1;
        }
        self.generation += 1;
        let branch: Arc<[Hash256]> = match &tdp {
            Some(t) => t.merkle_path.clone(),
            None => coinbase_merkle_branch(&template.txids().collect::<Vec<_>>())
                .into_iter()
                .collect(),
        };
        let g = Arc::new(Generation {
            id: self.generation,
            epoch: self.epoch,
            clean,
            fingerprint: fingerprint(&template.prev_hash, &branch),
            merkle_branch: branch,
            template,
            tdp,
            created: now,
            config: self.config.clone(),
            ids: self.ids.clone(),
            jobs: Mutex::new(Vec::new()),
        });
        self.current = Some(g.clone());
        g
    }
}

/// One adopted template and the jobs built from it.
#[derive(Debug)]
pub struct Generation {
    /// Increments with every template adopted.
    pub id: u64,
    /// Increments with every new previous-block hash.
    pub epoch: u64,
    /// The template has a new previous-block hash: its jobs are clean.
    pub clean: bool,
    /// The template.
    pub template: Arc<Template>,
    /// Set when the template came from a Template Provider.
    pub tdp: Option<Arc<TdpTemplate>>,
    /// The merkle branch every coinbase txid of its jobs climbs.
    pub merkle_branch: Arc<[Hash256]>,
    /// The template's fingerprint, as events name it.
    pub fingerprint: Fingerprint,
    /// When the template was adopted.
    pub created: Timestamp,
    config: Arc<JobConfig>,
    ids: Arc<AtomicU64>,
    jobs: Mutex<Vec<(ScriptBuf, Arc<Job>)>>,
}

impl Generation {
    /// The job paying the whole coinbase value to `payout`, built on first use.
    pub fn job(&self, payout: &ScriptBuf) -> Result<Arc<Job>, CoinbaseError> {
        let mut jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, j)) = jobs.iter().find(|(s, _)| s == payout) {
            return Ok(j.clone());
        }
        let t = &self.template;
        let coinbase = match &self.tdp {
            Some(tdp) => tdp.coinbase(
                &self.config.coinbase_tag,
                self.config.extranonce_len,
                payout,
            )?,
            None => CoinbaseSpec {
                tag: self.config.coinbase_tag.clone(),
                payouts: vec![Payout {
                    script_pubkey: payout.clone(),
                    value: t.coinbase_value,
                }],
                witness_commitment: t.witness_commitment,
                ..CoinbaseSpec::new(t.height, self.config.extranonce_len)
            }
            .build()?,
        };
        let job = Arc::new(Job::new(
            self.ids.fetch_add(1, Ordering::Relaxed),
            self.id,
            self.epoch,
            t.clone(),
            coinbase,
            self.merkle_branch.clone(),
            self.fingerprint,
            self.clean,
            self.created,
        )?);
        jobs.push((payout.clone(), job.clone()));
        Ok(job)
    }

    /// Subsidy plus fees of the template.
    pub fn value(&self) -> Amount {
        self.template.coinbase_value
    }

    /// A fresh id for re-sending a job under a name the miner has not seen (after a difficulty
    /// change: some firmware ignores a notify whose id it knows).
    pub fn fresh_id(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::Relaxed)
    }
}
