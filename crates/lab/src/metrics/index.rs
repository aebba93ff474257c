//! What the fleet's events are joined against: the chain's tips and accepted blocks, the
//! templates jobs come from, and the job source's own record of the jobs it sent (for SV2
//! standard jobs, which carry no fingerprint). Built in a first pass over the simnet log and the
//! non-fleet roles, so that the fleet logs, which hold almost all events, are read once.

use std::collections::HashMap;

use events::{BlockResult, EventKind, Fingerprint, Hash256, JobId};

use super::input::Site;

/// A tip of the network: a block some node made its tip.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tip {
    /// When the block first existed as any node's tip: simnet's `network` record, or the node
    /// that accepted a submitted block.
    pub first_ns: u64,
    pub height: u32,
    pub prev_hash: Hash256,
}

/// The chain as simnet's `TipChanged` and `BlockResult` events show it.
#[derive(Default)]
pub(crate) struct Chain {
    tips: Vec<Tip>,
    by_hash: HashMap<Hash256, u32>,
    /// The network's last tip (node `network`), else the job source node's.
    network_final: Option<(u64, Hash256)>,
    node_final: Option<(u64, Hash256)>,
    /// Per block, when the first block built on it existed: from then on a job on it is
    /// superseded.
    first_child_ns: HashMap<Hash256, u64>,
    /// Blocks a node accepted as a new tip.
    pub accepted: HashMap<Hash256, AcceptedBlock>,
    /// Every block submitted to any node, whatever its verdict: what a pool that writes no
    /// events submitted is told from here.
    pub submissions: std::collections::HashSet<Hash256>,
}

/// A block some node accepted as a new tip (simnet's `BlockResult`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct AcceptedBlock {
    pub height: u32,
    /// When the job source node accepted it, if it did.
    pub by_job_source_ns: Option<u64>,
}

impl Chain {
    pub(crate) fn on_tip(&mut self, ts: u64, node: &str, job_source: &str, t: &events::TipChanged) {
        let child = self.first_child_ns.entry(t.prev_hash).or_insert(ts);
        *child = (*child).min(ts);
        match self.by_hash.get(&t.hash) {
            Some(&i) => {
                let tip = &mut self.tips[i as usize];
                tip.first_ns = tip.first_ns.min(ts);
            }
            None => {
                self.by_hash.insert(t.hash, self.tips.len() as u32);
                self.tips.push(Tip {
                    first_ns: ts,
                    height: t.height,
                    prev_hash: t.prev_hash,
                });
            }
        }
        let slot = if node == "network" {
            &mut self.network_final
        } else if node == job_source {
            &mut self.node_final
        } else {
            return;
        };
        if slot.is_none_or(|(at, _)| ts >= at) {
            *slot = Some((ts, t.hash));
        }
    }

    pub(crate) fn on_block_result(
        &mut self,
        ts: u64,
        node: &str,
        job_source: &str,
        b: &BlockResult,
    ) {
        let e = self.accepted.entry(b.hash).or_insert(AcceptedBlock {
            height: b.height,
            by_job_source_ns: None,
        });
        if node == job_source {
            e.by_job_source_ns = Some(e.by_job_source_ns.map_or(ts, |t| t.min(ts)));
        }
    }

    /// Whether a block on top of `prev_hash` existed at `ts` (on any node): a job on
    /// `prev_hash` was then superseded for the network.
    pub(crate) fn superseded(&self, prev_hash: &Hash256, ts: u64) -> bool {
        self.first_child_ns.get(prev_hash).is_some_and(|&t| t <= ts)
    }

    pub(crate) fn tip_index(&self, hash: &Hash256) -> Option<u32> {
        self.by_hash.get(hash).copied()
    }

    pub(crate) fn tip(&self, i: u32) -> &Tip {
        &self.tips[i as usize]
    }

    pub(crate) fn tips(&self) -> impl Iterator<Item = &Tip> {
        self.tips.iter()
    }

    /// The final best chain, tip first, as far back as the events know it, and the height
    /// below which it is unknown (blocks there can be neither confirmed nor orphaned).
    pub(crate) fn best_chain(&self) -> (Vec<Hash256>, u32) {
        let Some((_, mut hash)) = self.network_final.or(self.node_final) else {
            return (Vec::new(), u32::MAX);
        };
        let mut chain = Vec::new();
        loop {
            let Some(&i) = self.by_hash.get(&hash) else {
                // The parent of the last known block: its height is one less.
                let known_below = chain
                    .last()
                    .and_then(|h| self.by_hash.get(h))
                    .map_or(u32::MAX, |&i| self.tips[i as usize].height);
                return (chain, known_below);
            };
            chain.push(hash);
            hash = self.tips[i as usize].prev_hash;
            if chain.len() > self.tips.len() {
                // A cycle cannot happen in a chain of hashes; stop rather than loop.
                return (chain, u32::MAX);
            }
        }
    }
}

/// A template a job can come from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Template {
    pub first_ns: u64,
    pub value_sats: u64,
    pub prev_hash: Hash256,
    /// Made by the job source node (simnet), so time-to-job counts from it; otherwise a role's
    /// own template (a pool that builds its own), used for its value only.
    pub from_node: bool,
}

/// Templates by fingerprint; the node's first, roles' own after.
#[derive(Default)]
pub(crate) struct TemplateBook {
    pub templates: Vec<Template>,
    by_fingerprint: HashMap<Fingerprint, u32>,
    /// The job source node's templates in time order: the network's value over time.
    pub node_timeline: Vec<(u64, u64)>,
    /// Role templates by (role log index, template id), for jobs sent with a template id.
    by_role_id: HashMap<(usize, u64), u32>,
}

impl TemplateBook {
    pub(crate) fn on_node_template(&mut self, ts: u64, t: &events::TemplateCreated) {
        self.node_timeline.push((ts, t.value_sats));
        self.add(ts, t, true);
    }

    pub(crate) fn on_role_template(&mut self, role: usize, ts: u64, t: &events::TemplateCreated) {
        let i = self.add(ts, t, false);
        self.by_role_id.insert((role, t.template_id), i);
    }

    fn add(&mut self, ts: u64, t: &events::TemplateCreated, from_node: bool) -> u32 {
        // The same content made again is the same template: it was available from the first.
        if let Some(&i) = self.by_fingerprint.get(&t.fingerprint) {
            // The node's record wins over a role's: time to job counts from the node.
            let known = &mut self.templates[i as usize];
            if from_node == known.from_node {
                known.first_ns = known.first_ns.min(ts);
            } else if from_node {
                *known = Template {
                    first_ns: ts,
                    value_sats: t.value_sats,
                    prev_hash: t.prev_hash,
                    from_node,
                };
            }
            return i;
        }
        let i = self.templates.len() as u32;
        self.templates.push(Template {
            first_ns: ts,
            value_sats: t.value_sats,
            prev_hash: t.prev_hash,
            from_node,
        });
        self.by_fingerprint.insert(t.fingerprint, i);
        i
    }

    pub(crate) fn by_fingerprint(&self, fp: Fingerprint) -> Option<u32> {
        self.by_fingerprint.get(&fp).copied()
    }

    pub(crate) fn by_role_id(&self, role: usize, template_id: u64) -> Option<u32> {
        self.by_role_id.get(&(role, template_id)).copied()
    }

    pub(crate) fn get(&self, i: u32) -> &Template {
        &self.templates[i as usize]
    }

    /// Sorts the node's timeline (files may interleave slightly) once all are read.
    pub(crate) fn seal(&mut self) {
        self.node_timeline.sort_by_key(|&(ts, _)| ts);
    }
}

/// What the job source recorded of a job it sent on an SV2 channel, for device jobs that carry
/// only a merkle root.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SentJob {
    pub fingerprint: Option<Fingerprint>,
    pub template: Option<(usize, u64)>,
}

/// Jobs the job sources sent, by (site, channel, job id). Channel and job ids are each
/// sender's own: with job declaration the JDC (farm site) numbers the devices' channels and
/// jobs, and the pool (pool site) its channel to the JDC, so the two must not be mixed.
#[derive(Default)]
pub(crate) struct JobJoin {
    sent: HashMap<(Site, u32, JobId), SentJob>,
    /// A farm-site role sent channel jobs: it, not the pool, is the devices' job source.
    farm_sends: bool,
}

impl JobJoin {
    pub(crate) fn on_job_sent(&mut self, role: usize, site: Site, j: &events::JobSent) {
        let Some(channel) = j.channel else {
            return; // SV1 jobs carry their own fingerprint to the device.
        };
        self.farm_sends |= site == Site::Farm;
        let e = self.sent.entry((site, channel, j.job_id)).or_default();
        e.fingerprint = e.fingerprint.or(j.fingerprint);
        if let Some(id) = j.template_id {
            e.template.get_or_insert((role, id));
        }
    }

    pub(crate) fn on_job_activated(&mut self, site: Site, a: &events::JobActivated) {
        let Some(channel) = a.channel else { return };
        let e = self.sent.entry((site, channel, a.job_id)).or_default();
        e.fingerprint = e.fingerprint.or(a.fingerprint);
    }

    /// The template of a device job known only by channel and id: from the farm site's job
    /// source where there is one, else from the pool site's.
    pub(crate) fn template(&self, book: &TemplateBook, channel: u32, job: JobId) -> Option<u32> {
        let site = if self.farm_sends {
            Site::Farm
        } else {
            Site::Pool
        };
        let s = self.sent.get(&(site, channel, job))?;
        s.fingerprint
            .and_then(|fp| book.by_fingerprint(fp))
            .or_else(|| s.template.and_then(|(r, id)| book.by_role_id(r, id)))
    }
}

/// The indices, built from everything but the fleet.
#[derive(Default)]
pub(crate) struct Index {
    pub chain: Chain,
    pub templates: TemplateBook,
    pub jobs: JobJoin,
}

impl Index {
    /// Feeds one simnet event.
    pub(crate) fn on_simnet(&mut self, ts: u64, kind: &EventKind, job_source: &str) {
        match kind {
            EventKind::TipChanged(t) => self.chain.on_tip(ts, t.node.as_str(), job_source, t),
            EventKind::TemplateCreated(t) if t.node.as_str() == job_source && !t.future => {
                self.templates.on_node_template(ts, t)
            }
            EventKind::BlockResult(b) => {
                self.chain.submissions.insert(b.hash);
                if b.accepted {
                    self.chain
                        .on_block_result(ts, b.node.as_str(), job_source, b)
                }
            }
            _ => {}
        }
    }

    /// Feeds one event of a non-fleet, non-tap role (`role` is its log's index, `site` where
    /// it runs).
    pub(crate) fn on_role(&mut self, role: usize, site: Site, ts: u64, kind: &EventKind) {
        match kind {
            EventKind::TemplateCreated(t) if !t.future => {
                self.templates.on_role_template(role, ts, t)
            }
            EventKind::JobSent(j) => self.jobs.on_job_sent(role, site, j),
            EventKind::JobActivated(a) => self.jobs.on_job_activated(site, a),
            _ => {}
        }
    }
}
