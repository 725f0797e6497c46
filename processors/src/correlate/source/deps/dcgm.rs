//! The DCGM family: NVIDIA's GPU exporter (`DCGM_FI_DEV_*`). Its series
//! describe a machine: they are kept by their `Hostname` label (or the
//! resource's host) and join traces by host, in the host source's `host`
//! table (`gpu_util`, `gpu_mem_used`), not by the spans' addresses.

use super::{DepRow, Family, Points, Window};
use crate::correlate::model::table::Column;

/// DCGM.
#[derive(Debug, Default)]
pub struct Dcgm;

/// DCGM adds no columns: its series join by host, in the `host` table.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct NoColumns {}

impl Family for Dcgm {
    type Row = NoColumns;

    fn name(&self) -> &'static str {
        "dcgm"
    }

    fn columns(&self) -> &'static [Column<NoColumns>] {
        &[]
    }

    fn system(&self, base: &str) -> Option<&'static str> {
        matches!(
            base,
            "DCGM_FI_DEV_GPU_UTIL" | "DCGM_FI_DEV_FB_USED" | "DCGM_FI_DEV_FB_FREE"
        )
        .then_some("gpu")
    }

    fn by_host(&self) -> bool {
        true
    }

    fn fill(&self, _r: &mut DepRow<NoColumns>, _points: &[Points<'_>], _w: &Window) {}
}
