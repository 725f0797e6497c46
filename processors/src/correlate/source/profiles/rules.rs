//! The profiles source's built-in rules: the code that held a span's time
//! on CPU (`cpu_hotspot`, `gc_pressure`) or a lock it waited for
//! (`lock_contention`), read from the `code` table beside `spans`.

use super::*;

impl Profiles {
    /// The rules, with this source's thresholds.
    pub(super) fn builtin_rules(&self) -> Vec<Rule> {
        let r = Rule::builtin;
        // A span slower than its normal (a baseline's excess; before its
        // operation has a baseline, its whole self time counts, with less
        // confidence), not a call waiting on another, whose own profile
        // covers its self time.
        // `what`: SQL text between the span's self time and the function.
        let on_cpu = |gc: &str, what: &str| {
            format!(
                r#"
SELECT c.trace_id,
  CASE WHEN c."join" = 'time' THEN 0.6 ELSE 0.8 END * CASE WHEN covers THEN 1.0 ELSE 0.75 END
    * CASE WHEN s.baseline_ms IS NULL THEN {UNLEARNED} ELSE 1.0 END AS confidence,
  concat(s.service, ' ', s.name, ' was on CPU ', CAST(CAST(c.time_ms AS BIGINT) AS VARCHAR), ' ms of its ',
         CAST(CAST(s.self_ms AS BIGINT) AS VARCHAR), ' ms',
         CASE WHEN covers THEN '' ELSE concat(' (', CAST(CAST(round(c.time_ms / s.baseline_ms) AS BIGINT) AS VARCHAR),
           '× the normal of the whole span: the work grew; the rest waited, for the CPU or else)') END,
         ', '{what}, CAST(CAST(round(c.share * 100) AS BIGINT) AS VARCHAR),
         '% in ', c.function, ' (', c.location, '; ', c."join", ' join',
         CASE WHEN s.baseline_ms IS NULL THEN '; no baseline yet: by its share of the span''s own time' ELSE '' END,
         ')') AS summary,
  c.span_id AS culprit_span_id,
  CASE WHEN covers THEN least(c.time_ms, s.self_ms) ELSE s.self_ms END AS explained_ms
FROM (SELECT *, time_ms >= {min_coverage} * self_ms AS covers
      FROM (SELECT c.*, s.self_ms FROM code c JOIN spans s ON s.trace_id = c.trace_id AND s.span_id = c.span_id)) c
  JOIN spans s ON s.trace_id = c.trace_id AND s.span_id = c.span_id
WHERE c.kind = 'cpu' AND s.kind NOT IN ('client', 'producer') AND coalesce(s.excess_ms, s.self_ms) > 0
  AND c.time_ms >= {min_time_ms} AND c.share >= {min_share}
  -- Its CPU covers its time, or the work itself grew: its CPU alone is
  -- slow by the baseline's measure, whatever else the span waited for (a
  -- starved host's run queue, which no CPU profile records): then it holds
  -- the span's self time, with less confidence.
  AND (covers OR c.time_ms >= {SLOW_FACTOR} * s.baseline_ms)
  AND c.gc_share {gc} 0.5"#,
                min_time_ms = self.min_time_ms,
                min_share = self.min_share,
                min_coverage = self.min_coverage,
            )
        };
        let on_cpu_cpu = on_cpu("<", "");
        let on_cpu_gc = on_cpu(
            ">=",
            ", CAST(CAST(round(c.gc_share * 100) AS BIGINT) AS VARCHAR), '% allocating and collecting garbage, driven by '",
        );
        vec![
            r("cpu_hotspot", &CPU_HOTSPOT, &on_cpu_cpu),
            r("gc_pressure", &GC_PRESSURE, &on_cpu_gc),
            r(
                "lock_contention",
                &LOCK_CONTENTION,
                &format!(
                    r#"
SELECT l.trace_id, CASE WHEN l."join" = 'time' THEN 0.7 ELSE 0.8 END
    * CASE WHEN s.baseline_ms IS NULL THEN {UNLEARNED} ELSE 1.0 END AS confidence,
  concat(s.service, ' ', s.name, ' was off CPU ', CAST(CAST(s.self_ms - coalesce(c.time_ms, 0) AS BIGINT) AS VARCHAR), ' ms of its ',
         CAST(CAST(s.self_ms AS BIGINT) AS VARCHAR), ' ms while its lock''s contentions waited ', CAST(CAST(l.mean_wait_ms AS BIGINT) AS VARCHAR),
         ' ms on average (', CAST(CAST(l.delay_ms AS BIGINT) AS VARCHAR), ' ms in all), ', CAST(CAST(round(l.share * 100) AS BIGINT) AS VARCHAR), '% of the delay at ', l.function, ' (', l.location,
         '; ', l."join", ' join',
         CASE WHEN s.baseline_ms IS NULL THEN '; no baseline yet: by the length of its wait' ELSE '' END,
         ')',
         CASE WHEN w.function IS NULL OR w.function = l.function THEN ''
              ELSE concat('; it waited in ', w.function, ' (', w.location, ')') END) AS summary,
  l.span_id AS culprit_span_id,
  s.self_ms - coalesce(c.time_ms, 0) AS explained_ms
FROM code l JOIN spans s ON s.trace_id = l.trace_id AND s.span_id = l.span_id
LEFT JOIN code c ON c.trace_id = l.trace_id AND c.span_id = l.span_id AND c.kind = 'cpu' AND c."join" <> 'time'
-- The waiter's side (Go's block profile), when it is profiled.
LEFT JOIN code w ON w.trace_id = l.trace_id AND w.span_id = l.span_id AND w.kind = 'lock_wait'
WHERE l.kind = 'lock' AND s.kind NOT IN ('client', 'producer') AND coalesce(s.excess_ms, s.self_ms) > 0
  AND l.share >= {min_share}
  -- Before a baseline, the wait itself must be long enough to be a cause.
  AND (s.baseline_ms IS NOT NULL OR s.self_ms - coalesce(c.time_ms, 0) >= {min_time_ms})
  AND coalesce(c.time_ms, 0) < {min_coverage} * s.self_ms
  -- Not a span whose own CPU is mostly the collector's: its time off CPU
  -- is the collector's too (an assist parks until the background marking
  -- catches up), whatever a lock did in the same window.
  AND coalesce(c.gc_share, 0) < 0.5
  -- Nor one whose own CPU grew past its normal (the `cpu_hotspot` rule's
  -- second reading): its work explains it, off CPU in the run queue of a
  -- starved host, which a lock's window does not tell apart.
  AND NOT coalesce(c.time_ms >= greatest({SLOW_FACTOR} * s.baseline_ms, {min_time_ms}), false)
  -- Its contentions can hold the span's wait: their mean is a share of
  -- it, or their delay covers it (few, long ones: one sample names it).
  AND (l.mean_wait_ms >= {LOCK_WAIT_SHARE} * (s.self_ms - coalesce(c.time_ms, 0))
       OR l.delay_ms >= s.self_ms - coalesce(c.time_ms, 0)
       -- or the waiter's side's: the same waits, seen from the span's side.
       OR w.mean_wait_ms >= {LOCK_WAIT_SHARE} * (s.self_ms - coalesce(c.time_ms, 0))
       OR w.delay_ms >= s.self_ms - coalesce(c.time_ms, 0))"#,
                    min_share = self.min_share,
                    min_coverage = self.min_coverage,
                    min_time_ms = self.min_time_ms,
                ),
            ),
        ]
    }
}
