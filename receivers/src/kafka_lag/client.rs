//! The broker client: metadata, watermarks, consumer groups and their
//! committed offsets, through librdkafka (rdkafka).
//!
//! Every call here blocks (librdkafka waits on its own threads); the
//! receiver runs them on tokio's blocking pool, never on the async workers.
//!
//! Group listing and committed offsets use librdkafka's admin API
//! (`ListConsumerGroups`, `ListConsumerGroupOffsets`), which rust-rdkafka does
//! not wrap, through `rdkafka-sys`. `ListConsumerGroups` sends only
//! ListGroups; librdkafka's older `rd_kafka_list_groups` also sends
//! DescribeGroups, which some Kafka-protocol brokers do not serve, and would
//! lose the whole listing with it. Member counts come from `DescribeConsumerGroups`
//! separately, so its failure loses only the counts.

#![allow(unsafe_code)] // librdkafka admin calls rust-rdkafka does not wrap; confined to this module.

use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use rdkafka_sys as sys;
use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::os::raw::c_char;
use std::time::Duration;

use crate::ReceiverError;

/// Partitions per ListOffsets call (see [`Client::list_offsets`]).
const OFFSETS_CHUNK: usize = 500;

/// topic → partitions.
pub type Topics = BTreeMap<String, Vec<i32>>;

/// (topic, partition) → value.
pub type PerPartition<T> = BTreeMap<(String, i32), T>;

/// A consumer group as listed by the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    /// Group id.
    pub id: String,
    /// librdkafka's state name (`Stable`, `Empty`, `Dead`, `Unknown`, ...).
    pub state: String,
}

/// The client: one admin handle and one group-less consumer for offsets.
pub struct Client {
    admin: AdminClient<DefaultClientContext>,
    consumer: BaseConsumer,
    timeout: Duration,
}

fn kafka_err(op: &'static str, message: impl std::fmt::Display) -> ReceiverError {
    ReceiverError::Kafka {
        op,
        message: message.to_string(),
    }
}

impl Client {
    /// Connect (lazily; librdkafka connects on first use). `settings` are
    /// librdkafka properties (`bootstrap.servers`, `security.protocol`,
    /// `sasl.*`, `ssl.*`, ...). `timeout` bounds each call.
    pub fn new(
        settings: &BTreeMap<String, String>,
        timeout: Duration,
    ) -> Result<Self, ReceiverError> {
        let mut cfg = ClientConfig::new();
        for (k, v) in settings {
            cfg.set(k, v);
        }
        // The consumer never joins a group: it only asks for offsets.
        cfg.set("enable.auto.commit", "false");
        let admin: AdminClient<DefaultClientContext> = cfg
            .create()
            .map_err(|e| kafka_err("create admin client", e))?;
        let consumer: BaseConsumer = cfg.create().map_err(|e| kafka_err("create consumer", e))?;
        Ok(Client {
            admin,
            consumer,
            timeout,
        })
    }

    /// Every topic and its partitions (internal topics such as `__consumer_offsets` excluded).
    pub fn topics(&self) -> Result<Topics, ReceiverError> {
        let md = self
            .consumer
            .fetch_metadata(None, self.timeout)
            .map_err(|e| kafka_err("metadata", e))?;
        let mut out = Topics::new();
        for t in md.topics() {
            if t.name().starts_with("__") {
                continue;
            }
            if let Some(e) = t.error() {
                tracing::debug!(topic = t.name(), error = ?e, "topic metadata error; skipped this round");
                continue;
            }
            let mut parts: Vec<i32> = t.partitions().iter().map(|p| p.id()).collect();
            parts.sort_unstable();
            out.insert(t.name().to_string(), parts);
        }
        Ok(out)
    }

    /// Oldest and latest offsets of every partition, in two batched
    /// ListOffsets rounds (one per broker each), not one call per partition.
    pub fn watermarks(&self, topics: &Topics) -> Result<PerPartition<(i64, i64)>, ReceiverError> {
        let earliest = self.list_offsets(topics, Offset::Beginning)?;
        let latest = self.list_offsets(topics, Offset::End)?;
        let mut out = PerPartition::new();
        for (k, hi) in latest {
            let lo = earliest.get(&k).copied().unwrap_or(0);
            out.insert(k, (lo, hi));
        }
        Ok(out)
    }

    /// ListOffsets with the special timestamps -2 (earliest) / -1 (latest),
    /// sent by librdkafka's offsetsForTimes, batched per leader. librdkafka
    /// merges the answer into the request list by linear search (quadratic
    /// in the list's length), so large clusters are asked in chunks of
    /// [`OFFSETS_CHUNK`] partitions, the chunks in flight together.
    fn list_offsets(
        &self,
        topics: &Topics,
        which: Offset,
    ) -> Result<PerPartition<i64>, ReceiverError> {
        let all: Vec<(&String, i32)> = topics
            .iter()
            .flat_map(|(t, parts)| parts.iter().map(move |p| (t, *p)))
            .collect();
        let results: Vec<Result<PerPartition<i64>, ReceiverError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = all
                .chunks(OFFSETS_CHUNK)
                .map(|chunk| scope.spawn(move || self.list_offsets_chunk(chunk, which)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(kafka_err("list offsets", "a request thread panicked"))
                    })
                })
                .collect()
        });
        let mut out = PerPartition::new();
        for r in results {
            out.extend(r?);
        }
        Ok(out)
    }

    fn list_offsets_chunk(
        &self,
        chunk: &[(&String, i32)],
        which: Offset,
    ) -> Result<PerPartition<i64>, ReceiverError> {
        let mut tpl = TopicPartitionList::with_capacity(chunk.len());
        for (t, p) in chunk {
            tpl.add_partition_offset(t, *p, which)
                .map_err(|e| kafka_err("list offsets", e))?;
        }
        let res = self
            .consumer
            .offsets_for_times(tpl, self.timeout)
            .map_err(|e| kafka_err("list offsets", e))?;
        let mut out = PerPartition::new();
        for e in res.elements() {
            if e.error().is_err() {
                continue;
            }
            if let Offset::Offset(o) = e.offset() {
                out.insert((e.topic().to_string(), e.partition()), o);
            }
        }
        Ok(out)
    }

    fn rk(&self) -> *mut sys::rd_kafka_t {
        self.admin.inner().native_ptr()
    }

    /// Every consumer group the cluster knows (ListGroups on every broker),
    /// and the errors of brokers that did not answer (their groups are missing).
    pub fn list_groups(&self) -> Result<(Vec<GroupListing>, Vec<String>), ReceiverError> {
        let call = AdminCall::new(
            self.rk(),
            sys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPS,
            self.timeout,
        )?;
        // SAFETY: rk, options and queue are live for the call; the result is
        // read before the event is destroyed (AdminCall's Drop).
        unsafe { sys::rd_kafka_ListConsumerGroups(call.rk, call.options, call.queue) };
        let ev = call.wait("list groups")?;
        let mut out = Vec::new();
        let mut missing = Vec::new();
        unsafe {
            let res = sys::rd_kafka_event_ListConsumerGroups_result(ev.0);
            if res.is_null() {
                return Err(kafka_err("list groups", "no result in the event"));
            }
            let mut n = 0usize;
            let arr = sys::rd_kafka_ListConsumerGroups_result_valid(res, &mut n);
            for i in 0..n {
                let g = *arr.add(i);
                let id = cstr(sys::rd_kafka_ConsumerGroupListing_group_id(g));
                let state = cstr(sys::rd_kafka_consumer_group_state_name(
                    sys::rd_kafka_ConsumerGroupListing_state(g),
                ));
                out.push(GroupListing { id, state });
            }
            let mut ne = 0usize;
            let errs = sys::rd_kafka_ListConsumerGroups_result_errors(res, &mut ne);
            for i in 0..ne {
                let e = *errs.add(i);
                missing.push(cstr(sys::rd_kafka_error_string(e)));
            }
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok((out, missing))
    }

    /// Committed offsets of each group (OffsetFetch to each group's
    /// coordinator, all groups in flight at once). A group whose fetch fails
    /// is returned as an error of its own; the others are unaffected.
    pub fn committed(
        &self,
        groups: &[String],
    ) -> BTreeMap<String, Result<PerPartition<i64>, ReceiverError>> {
        let mut out = BTreeMap::new();
        if groups.is_empty() {
            return out;
        }
        let call = match AdminCall::new(
            self.rk(),
            sys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPOFFSETS,
            self.timeout,
        ) {
            Ok(c) => c,
            Err(e) => {
                for g in groups {
                    out.insert(g.clone(), Err(kafka_err("committed offsets", &e)));
                }
                return out;
            }
        };
        let mut sent = 0usize;
        for g in groups {
            let Ok(id) = CString::new(g.as_str()) else {
                out.insert(
                    g.clone(),
                    Err(kafka_err("committed offsets", "group id contains NUL")),
                );
                continue;
            };
            // librdkafka takes exactly one group per ListConsumerGroupOffsets call.
            unsafe {
                let mut req =
                    sys::rd_kafka_ListConsumerGroupOffsets_new(id.as_ptr(), std::ptr::null());
                sys::rd_kafka_ListConsumerGroupOffsets(
                    call.rk,
                    &mut req,
                    1,
                    call.options,
                    call.queue,
                );
                sys::rd_kafka_ListConsumerGroupOffsets_destroy(req);
            }
            sent += 1;
        }
        for _ in 0..sent {
            let ev = match call.wait("committed offsets") {
                Ok(ev) => ev,
                Err(e) => {
                    // A timeout: every group not answered yet gets the error.
                    for g in groups {
                        out.entry(g.clone())
                            .or_insert_with(|| Err(kafka_err("committed offsets", &e)));
                    }
                    return out;
                }
            };
            unsafe {
                let res = sys::rd_kafka_event_ListConsumerGroupOffsets_result(ev.0);
                if res.is_null() {
                    continue;
                }
                let mut n = 0usize;
                let arr = sys::rd_kafka_ListConsumerGroupOffsets_result_groups(res, &mut n);
                for i in 0..n {
                    let gr = *arr.add(i);
                    let name = cstr(sys::rd_kafka_group_result_name(gr));
                    let err = sys::rd_kafka_group_result_error(gr);
                    if !err.is_null() {
                        let msg = cstr(sys::rd_kafka_error_string(err));
                        out.insert(name, Err(kafka_err("committed offsets", msg)));
                        continue;
                    }
                    let mut offsets = PerPartition::new();
                    let list = sys::rd_kafka_group_result_partitions(gr);
                    if !list.is_null() {
                        let list = &*list;
                        for j in 0..usize::try_from(list.cnt).unwrap_or(0) {
                            let p = &*list.elems.add(j);
                            // A negative offset is "no commit" (-1001): not reported as lag.
                            if p.err == sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
                                && p.offset >= 0
                            {
                                offsets.insert((cstr(p.topic), p.partition), p.offset);
                            }
                        }
                    }
                    out.insert(name, Ok(offsets));
                }
            }
        }
        for g in groups {
            out.entry(g.clone())
                .or_insert_with(|| Err(kafka_err("committed offsets", "no answer for the group")));
        }
        out
    }

    /// Members of each group and what each is assigned (DescribeGroups).
    /// Brokers that do not serve DescribeGroups make this fail as a whole;
    /// the caller reports it and leaves the members out.
    pub fn members(&self, groups: &[String]) -> Result<BTreeMap<String, Members>, ReceiverError> {
        let mut out = BTreeMap::new();
        if groups.is_empty() {
            return Ok(out);
        }
        let ids: Vec<CString> = groups
            .iter()
            .filter_map(|g| CString::new(g.as_str()).ok())
            .collect();
        let mut ptrs: Vec<*const c_char> = ids.iter().map(|c| c.as_ptr()).collect();
        let call = AdminCall::new(
            self.rk(),
            sys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBECONSUMERGROUPS,
            self.timeout,
        )?;
        unsafe {
            sys::rd_kafka_DescribeConsumerGroups(
                call.rk,
                ptrs.as_mut_ptr(),
                ptrs.len(),
                call.options,
                call.queue,
            );
        }
        let ev = call.wait("describe groups")?;
        let mut first_error = None;
        unsafe {
            let res = sys::rd_kafka_event_DescribeConsumerGroups_result(ev.0);
            if res.is_null() {
                return Err(kafka_err("describe groups", "no result in the event"));
            }
            let mut n = 0usize;
            let arr = sys::rd_kafka_DescribeConsumerGroups_result_groups(res, &mut n);
            for i in 0..n {
                let d = *arr.add(i);
                let err = sys::rd_kafka_ConsumerGroupDescription_error(d);
                if !err.is_null() {
                    first_error.get_or_insert_with(|| cstr(sys::rd_kafka_error_string(err)));
                    continue;
                }
                let id = cstr(sys::rd_kafka_ConsumerGroupDescription_group_id(d));
                let count = sys::rd_kafka_ConsumerGroupDescription_member_count(d);
                let mut m = Members {
                    count: i64::try_from(count).unwrap_or(i64::MAX),
                    owners: BTreeMap::new(),
                };
                for j in 0..count {
                    let md = sys::rd_kafka_ConsumerGroupDescription_member(d, j);
                    if md.is_null() {
                        continue;
                    }
                    let owner = Owner {
                        client_id: cstr(sys::rd_kafka_MemberDescription_client_id(md)),
                        host: cstr(sys::rd_kafka_MemberDescription_host(md))
                            .trim_start_matches('/')
                            .to_string(),
                    };
                    let a = sys::rd_kafka_MemberDescription_assignment(md);
                    if a.is_null() {
                        continue;
                    }
                    let parts = sys::rd_kafka_MemberAssignment_partitions(a);
                    if parts.is_null() {
                        continue;
                    }
                    let cnt = usize::try_from((*parts).cnt).unwrap_or(0);
                    for k in 0..cnt {
                        let e = &*(*parts).elems.add(k);
                        m.owners.insert((cstr(e.topic), e.partition), owner.clone());
                    }
                }
                out.insert(id, m);
            }
        }
        match first_error {
            // Not one group described: the broker does not serve it.
            Some(e) if out.is_empty() => Err(kafka_err("describe groups", e)),
            _ => Ok(out),
        }
    }
}

/// Who owns a partition in a group: the member's client id and host, as
/// Burrow reports a partition's `owner` and `client_id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// The member's `client.id`.
    pub client_id: String,
    /// The host the member connected from.
    pub host: String,
}

/// A described group: its member count and the owner of each partition
/// assigned to a member.
#[derive(Debug, Clone, Default)]
pub struct Members {
    /// Members of the group.
    pub count: i64,
    /// (topic, partition) → the member it is assigned to.
    pub owners: BTreeMap<(String, i32), Owner>,
}

/// A borrowed C string as an owned String (lossy); empty for null.
///
/// # Safety
/// `p` is null or a valid NUL-terminated string.
unsafe fn cstr(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// An admin request's options and result queue, destroyed on drop.
struct AdminCall {
    rk: *mut sys::rd_kafka_t,
    options: *mut sys::rd_kafka_AdminOptions_t,
    queue: *mut sys::rd_kafka_queue_t,
    timeout: Duration,
}

/// A result event, destroyed on drop.
struct Event(*mut sys::rd_kafka_event_t);

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: the event came from rd_kafka_queue_poll and is destroyed once.
        unsafe { sys::rd_kafka_event_destroy(self.0) }
    }
}

impl AdminCall {
    fn new(
        rk: *mut sys::rd_kafka_t,
        op: sys::rd_kafka_admin_op_t,
        timeout: Duration,
    ) -> Result<Self, ReceiverError> {
        // SAFETY: rk is the live handle of the admin client that owns this call.
        unsafe {
            let options = sys::rd_kafka_AdminOptions_new(rk, op);
            if options.is_null() {
                return Err(kafka_err("admin options", "librdkafka returned no options"));
            }
            let mut errstr = [0 as c_char; 256];
            let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
            let rc = sys::rd_kafka_AdminOptions_set_request_timeout(
                options,
                ms,
                errstr.as_mut_ptr(),
                errstr.len(),
            );
            if rc != sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                sys::rd_kafka_AdminOptions_destroy(options);
                return Err(kafka_err("admin options", cstr(errstr.as_ptr())));
            }
            let queue = sys::rd_kafka_queue_new(rk);
            Ok(AdminCall {
                rk,
                options,
                queue,
                timeout,
            })
        }
    }

    /// The next result event, or an error (timeout, or the request failed).
    fn wait(&self, op: &'static str) -> Result<Event, ReceiverError> {
        // A little longer than the request timeout, so librdkafka's own
        // timeout answers first with its reason.
        let ms =
            i32::try_from((self.timeout + Duration::from_secs(1)).as_millis()).unwrap_or(i32::MAX);
        // SAFETY: the queue is live until drop.
        let ev = unsafe { sys::rd_kafka_queue_poll(self.queue, ms) };
        if ev.is_null() {
            return Err(kafka_err(op, "timed out"));
        }
        let ev = Event(ev);
        let code = unsafe { sys::rd_kafka_event_error(ev.0) };
        if code != sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            let msg = unsafe { cstr(sys::rd_kafka_event_error_string(ev.0)) };
            return Err(kafka_err(
                op,
                format!("{} ({msg})", RDKafkaErrorCode::from(code)),
            ));
        }
        Ok(ev)
    }
}

impl Drop for AdminCall {
    fn drop(&mut self) {
        // SAFETY: both were created in `new` and are destroyed once.
        unsafe {
            sys::rd_kafka_queue_destroy(self.queue);
            sys::rd_kafka_AdminOptions_destroy(self.options);
        }
    }
}
