//! Reading a store file: [`StoreReader`] for audits and tests (read-only, usable while the pool
//! writes), and the state the writer resumes from when it opens a file.

use std::path::{Path, PathBuf};

use rusqlite::Connection;

use super::{schema, BlockRecord, StoreError, Ticket, UsedToken, WorkerKey};

/// A share as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredShare {
    /// The ticket [`super::Store::record_share`] returned for it.
    pub ticket: Ticket,
    /// The worker name.
    pub worker: String,
    /// The difficulty credited.
    pub difficulty: f64,
    /// The engine's job id.
    pub job_id: u64,
    /// When it was accepted (Unix milliseconds).
    pub time_ms: u64,
    /// The share's block-header hash, internal byte order.
    pub hash: [u8; 32],
}

/// A found block as stored, with the node's last answer to its submission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredBlock {
    /// Its ticket.
    pub ticket: Ticket,
    /// The block hash, internal byte order.
    pub hash: [u8; 32],
    /// The block height.
    pub height: u32,
    /// The worker that found it.
    pub worker: String,
    /// The engine's job id.
    pub job_id: u64,
    /// When it was found (Unix milliseconds).
    pub time_ms: u64,
    /// `"accepted"` or the node's reject reason; `None` while the node has not answered.
    pub result: Option<String>,
    /// When the last answer was recorded (unix ms).
    pub result_time_ms: Option<u64>,
    /// The serialized block, as submitted.
    pub block: Vec<u8>,
}

/// A read-only view of a store file. Each query sees the file as of its own start: what the
/// writer has committed by then, nothing half-written.
pub struct StoreReader {
    conn: Connection,
    path: PathBuf,
}

impl StoreReader {
    /// Opens the store file at `path` read-only (it must exist).
    pub fn open(path: impl AsRef<Path>) -> Result<StoreReader, StoreError> {
        let path = path.as_ref();
        Ok(StoreReader {
            conn: schema::open_for_reading(path)?,
            path: path.to_owned(),
        })
    }

    /// Every share, in ticket order.
    pub fn shares(&self) -> Result<Vec<StoredShare>, StoreError> {
        let what = "listing shares";
        let get = |e| self.read_error(what, e);
        self.rows(
            what,
            "SELECT s.seq, COALESCE(w.name, ''), s.difficulty, s.job_id, s.time_ms, s.hash \
             FROM share s LEFT JOIN worker w ON w.id = s.worker ORDER BY s.seq",
            |row| {
                Ok(StoredShare {
                    ticket: Ticket(row.get::<_, i64>(0).map_err(get)? as u64),
                    worker: row.get(1).map_err(get)?,
                    difficulty: row.get(2).map_err(get)?,
                    job_id: row.get::<_, i64>(3).map_err(get)? as u64,
                    time_ms: row.get::<_, i64>(4).map_err(get)? as u64,
                    hash: self.hash(row, 5, what)?,
                })
            },
        )
    }

    /// Shares stored.
    pub fn share_count(&self) -> Result<u64, StoreError> {
        self.conn
            .query_row("SELECT count(*) FROM share", [], |row| row.get::<_, i64>(0))
            .map(|n| n as u64)
            .map_err(|e| self.read_error("counting shares", e))
    }

    /// Every block, in ticket order, with the node's last answer.
    pub fn blocks(&self) -> Result<Vec<StoredBlock>, StoreError> {
        let what = "listing blocks";
        let get = |e| self.read_error(what, e);
        self.rows(
            what,
            "SELECT b.seq, b.hash, b.height, COALESCE(w.name, ''), b.job_id, b.time_ms, \
                    r.result, r.time_ms, b.block \
             FROM block b \
             LEFT JOIN worker w ON w.id = b.worker \
             LEFT JOIN block_result r ON r.seq = \
                 (SELECT max(seq) FROM block_result WHERE hash = b.hash) \
             ORDER BY b.seq",
            |row| {
                Ok(StoredBlock {
                    ticket: Ticket(row.get::<_, i64>(0).map_err(get)? as u64),
                    hash: self.hash(row, 1, what)?,
                    height: row.get(2).map_err(get)?,
                    worker: row.get(3).map_err(get)?,
                    job_id: row.get::<_, i64>(4).map_err(get)? as u64,
                    time_ms: row.get::<_, i64>(5).map_err(get)? as u64,
                    result: row.get(6).map_err(get)?,
                    result_time_ms: row.get::<_, Option<i64>>(7).map_err(get)?.map(|t| t as u64),
                    block: row.get(8).map_err(get)?,
                })
            },
        )
    }

    /// Every row `sql` selects, in order, each as `read` reads it; `what` names the query in
    /// errors.
    fn rows<T>(
        &self,
        what: &'static str,
        sql: &str,
        read: impl Fn(&rusqlite::Row<'_>) -> Result<T, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        let mut st = self
            .conn
            .prepare(sql)
            .map_err(|e| self.read_error(what, e))?;
        let mut rows = st.query([]).map_err(|e| self.read_error(what, e))?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(|e| self.read_error(what, e))? {
            out.push(read(row)?);
        }
        Ok(out)
    }

    fn hash(
        &self,
        row: &rusqlite::Row<'_>,
        column: usize,
        what: &'static str,
    ) -> Result<[u8; 32], StoreError> {
        read_hash(row, column).map_err(|e| match e {
            HashError::Sql(e) => self.read_error(what, e),
            HashError::Length(n) => StoreError::Corrupt {
                path: self.path.clone(),
                what: format!("{what}: a hash of {n} bytes"),
            },
        })
    }

    fn read_error(&self, what: &'static str, source: rusqlite::Error) -> StoreError {
        StoreError::Read {
            path: self.path.clone(),
            what,
            source,
        }
    }
}

enum HashError {
    Sql(rusqlite::Error),
    Length(usize),
}

fn read_hash(row: &rusqlite::Row<'_>, column: usize) -> Result<[u8; 32], HashError> {
    let blob = row
        .get_ref(column)
        .and_then(|v| v.as_blob().map_err(rusqlite::Error::from))
        .map_err(HashError::Sql)?;
    blob.try_into().map_err(|_| HashError::Length(blob.len()))
}

/// What the writer resumes from when it opens a file.
pub(super) struct Resume {
    /// The highest ticket in the file (0 for a new file): tickets go on from there.
    pub last_ticket: u64,
    /// The most recently used worker names (as many as memory keeps), with their keys, most
    /// recent first.
    pub workers: Vec<(Box<str>, i64)>,
    /// Worker names in the file.
    pub worker_count: u64,
    /// The highest worker key in the file (0: none).
    pub last_worker: i64,
    /// Blocks persisted by an earlier run that never got the node's answer.
    pub awaiting_answer: Vec<BlockRecord>,
    /// The latest recorded result of every answered block, in no particular order.
    pub answered: Vec<String>,
    /// Used job declaration tokens not expired at `now_ms`.
    pub used_tokens: Vec<UsedToken>,
    /// Each of `workers`' accepted shares and their difficulties' sum.
    pub worker_totals: Vec<(Box<str>, u64, f64)>,
}

/// `worker_cache`: the most worker names to load.
pub(super) fn resume(
    conn: &Connection,
    path: &Path,
    now_ms: u64,
    worker_cache: usize,
) -> Result<Resume, StoreError> {
    let setup = |what| {
        move |source| StoreError::Setup {
            path: path.to_owned(),
            what,
            source,
        }
    };
    let last_ticket: i64 = conn
        .query_row(
            "SELECT max(coalesce((SELECT max(seq) FROM share), 0), \
                        coalesce((SELECT max(seq) FROM block), 0), \
                        coalesce((SELECT max(seq) FROM block_result), 0), \
                        coalesce((SELECT max(seq) FROM used_token), 0))",
            [],
            |row| row.get(0),
        )
        .map_err(setup("finding the last ticket"))?;

    let what = "counting worker names";
    let (worker_count, last_worker): (i64, i64) = conn
        .query_row(
            "SELECT count(*), coalesce(max(id), 0) FROM worker",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .map_err(setup(what))?;
    // The names memory keeps, most recently used first: those with the latest shares, then
    // (if room is left) the newest names without any. Their totals come in the same pass over
    // the share table: a few seconds for tens of millions of shares, once per start.
    let what = "loading the most recently used worker names and their totals";
    let mut st = conn
        .prepare(
            "SELECT w.id, w.name, t.n, t.work FROM \
             (SELECT worker, count(*) AS n, sum(difficulty) AS work, max(seq) AS last \
              FROM share GROUP BY worker ORDER BY last DESC LIMIT ?1) t \
             JOIN worker w ON w.id = t.worker ORDER BY t.last DESC",
        )
        .map_err(setup(what))?;
    let mut workers: Vec<(Box<str>, i64)> = Vec::new();
    let mut worker_totals = Vec::new();
    let rows = st
        .query_map([worker_cache as i64], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, String>(1)?.into_boxed_str(),
                row.get::<_, i64>(2)? as u64,
                row.get::<_, f64>(3)?,
            ))
        })
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
        .map_err(setup(what))?;
    for (id, name, n, work) in rows {
        worker_totals.push((name.clone(), n, work));
        workers.push((name, id));
    }
    if workers.len() < worker_cache {
        // Room left: the newest names that have no share yet (one walk of the worker table's
        // key from the top, skipping names already loaded).
        let what = "loading the newest worker names";
        let loaded: std::collections::HashSet<i64> = workers.iter().map(|&(_, id)| id).collect();
        let mut st = conn
            .prepare("SELECT id, name FROM worker ORDER BY id DESC")
            .map_err(setup(what))?;
        let mut rows = st.query([]).map_err(setup(what))?;
        while workers.len() < worker_cache {
            let Some(row) = rows.next().map_err(setup(what))? else {
                break;
            };
            let id: i64 = row.get(0).map_err(setup(what))?;
            if !loaded.contains(&id) {
                let name: String = row.get(1).map_err(setup(what))?;
                workers.push((name.into_boxed_str(), id));
            }
        }
    }

    let what = "loading blocks awaiting the node's answer";
    let mut st = conn
        .prepare(
            "SELECT hash, height, worker, job_id, time_ms, block FROM block \
             WHERE hash NOT IN (SELECT hash FROM block_result) ORDER BY seq",
        )
        .map_err(setup(what))?;
    let mut rows = st.query([]).map_err(setup(what))?;
    let mut awaiting_answer = Vec::new();
    while let Some(row) = rows.next().map_err(setup(what))? {
        let hash = read_hash(row, 0).map_err(|e| match e {
            HashError::Sql(e) => setup(what)(e),
            HashError::Length(n) => StoreError::Corrupt {
                path: path.to_owned(),
                what: format!("{what}: a hash of {n} bytes"),
            },
        })?;
        awaiting_answer.push(BlockRecord {
            hash,
            height: row.get(1).map_err(setup(what))?,
            worker: WorkerKey(row.get(2).map_err(setup(what))?),
            job_id: row.get::<_, i64>(3).map_err(setup(what))? as u64,
            time_ms: row.get::<_, i64>(4).map_err(setup(what))? as u64,
            block: row.get(5).map_err(setup(what))?,
        });
    }

    let what = "loading the answers blocks got";
    // SQLite takes a bare column beside max() from the row that has the maximum.
    let mut st = conn
        .prepare("SELECT result, max(seq) FROM block_result GROUP BY hash")
        .map_err(setup(what))?;
    let answered = st
        .query_map([], |row| row.get::<_, String>(0))
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
        .map_err(setup(what))?;

    let what = "loading used job declaration tokens";
    let mut st = conn
        .prepare("SELECT id, expires_ms, time_ms FROM used_token WHERE expires_ms >= ?1")
        .map_err(setup(what))?;
    let used_tokens = st
        .query_map([now_ms as i64], |row| {
            Ok(UsedToken {
                id: row.get::<_, i64>(0)? as u64,
                expires_ms: row.get::<_, i64>(1)? as u64,
                time_ms: row.get::<_, i64>(2)? as u64,
            })
        })
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
        .map_err(setup(what))?;

    Ok(Resume {
        last_ticket: last_ticket.max(0) as u64,
        workers,
        worker_count: worker_count.max(0) as u64,
        last_worker: last_worker.max(0),
        awaiting_answer,
        answered,
        used_tokens,
        worker_totals,
    })
}
