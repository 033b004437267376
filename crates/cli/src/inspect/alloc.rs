//! `inspect --alloc`: the simulated segment map of loading the checkpoint in file order.

use crate::table::Table;
use serde::Serialize;
use std::fmt::Write;
use tensorplay_engine::alloc::caching::BlockInfo;
use tensorplay_engine::alloc::simulate::{simulate_load, LoadSimulation};
use tensorplay_engine::alloc::{AllocatorConfig, Pool};
use tensorplay_engine::Checkpoint;

/// The load on an unbounded simulated device with PyTorch's default allocator settings.
pub fn simulate(ckpt: &Checkpoint) -> LoadSimulation {
    simulate_load(ckpt, &AllocatorConfig::default(), u64::MAX, true)
}

#[derive(Serialize)]
pub struct AllocJson {
    requested_bytes: u64,
    allocated_bytes: u64,
    reserved_bytes: u64,
    fragmentation: f64,
    segments: Vec<SegmentJson>,
}

#[derive(Serialize)]
struct SegmentJson {
    address: u64,
    size: u64,
    pool: &'static str,
    blocks: Vec<BlockJson>,
}

#[derive(Serialize)]
struct BlockJson {
    offset: u64,
    size: u64,
    requested: u64,
    storage: Option<usize>,
}

fn pool_name(pool: Pool) -> &'static str {
    match pool {
        Pool::Small => "small",
        Pool::Large => "large",
    }
}

/// The storage whose block starts at `address`.
fn owner(sim: &LoadSimulation, block: &BlockInfo) -> Option<usize> {
    if !block.allocated {
        return None;
    }
    sim.placements
        .iter()
        .find(|(_, b)| b.address == block.address)
        .map(|(id, _)| *id)
}

pub fn json(sim: &LoadSimulation) -> AllocJson {
    let stats = &sim.stats;
    AllocJson {
        requested_bytes: stats.requested_bytes.current,
        allocated_bytes: stats.allocated_bytes.current,
        reserved_bytes: stats.reserved_bytes.current,
        fragmentation: sim.fragmentation(),
        segments: sim
            .segments
            .iter()
            .map(|seg| SegmentJson {
                address: seg.address,
                size: seg.size,
                pool: pool_name(seg.pool),
                blocks: seg
                    .blocks
                    .iter()
                    .map(|b| BlockJson {
                        offset: b.address - seg.address,
                        size: b.size,
                        requested: b.requested,
                        storage: owner(sim, b),
                    })
                    .collect(),
            })
            .collect(),
    }
}

pub fn text(sim: &LoadSimulation, out: &mut String) -> anyhow::Result<()> {
    let stats = &sim.stats;
    writeln!(
        out,
        "\nSimulated GPU load (PyTorch caching allocator, default settings): {} requested, {} allocated, {} reserved in {} segments ({:.1}% reserved but unallocated)",
        stats.requested_bytes.current,
        stats.allocated_bytes.current,
        stats.reserved_bytes.current,
        stats.segment.current,
        sim.fragmentation() * 100.0
    )?;
    let mut table = Table::new(&["SEGMENT", "POOL", "OFFSET", "BYTES", "REQUESTED", "HOLDS"]);
    for (i, seg) in sim.segments.iter().enumerate() {
        for b in &seg.blocks {
            table.row(vec![
                format!("{i} @ {:#x} ({} bytes)", seg.address, seg.size),
                pool_name(seg.pool).to_owned(),
                (b.address - seg.address).to_string(),
                b.size.to_string(),
                b.requested.to_string(),
                owner(sim, b).map_or("free".to_owned(), |id| format!("storage {id}")),
            ]);
        }
    }
    out.push_str(&table.render("  "));
    Ok(())
}
