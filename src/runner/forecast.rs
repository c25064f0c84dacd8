//! `bench plan`: the cells a sweep will measure, in order, and what each will cost, before
//! anything is measured. The rates come from two short calibration requests (`--server`), or from
//! an earlier run's records (`--from RUN`); the model is `cost`'s, the one the sweep's progress
//! bar uses, so a plan and the sweep it describes agree.

use std::time::Duration;

use serde::Serialize;

use crate::cli::{OutputArgs, PlanArgs, PlanFormat, SweepArgs};
use crate::config::{self, SweepConfig};
use crate::cost::{self, ServerRates};
use crate::exit::{Failure, Outcome};
use crate::measuring::setup;
use crate::progress::Progress;
use ttft_model::record::CellKey;

#[derive(Serialize)]
struct PlanOutput<'a> {
    plan_schema: u32,
    cells: Vec<PlannedCell<'a>>,
    total_cells: usize,
    forecast_s: Option<f64>,
    rates: Option<&'a ServerRates>,
    /// The thermal gate the sweep would run with (its cost is part of `forecast_s`).
    thermal: &'a config::ThermalPolicy,
    /// What the warm cells save on the server's disk (needs the model's KV size: a local
    /// llama.cpp server's GGUF, or `--model-file`); null when unknown or no cell is warm.
    warm_disk: Option<crate::measuring::slot_files::WarmDisk>,
}

#[derive(Serialize)]
struct PlannedCell<'a> {
    index: usize,
    cell: &'a CellKey,
    label: String,
    forecast_s: Option<f64>,
}

pub async fn plan(args: &PlanArgs) -> anyhow::Result<Outcome> {
    let sweep = SweepArgs::new_run(
        args.connection.clone(),
        args.measure.clone(),
        args.scenario.clone(),
        OutputArgs::default(),
    );
    let mut warm_disk = None;
    let (config, rates, model) = match (&args.from, &args.connection.server) {
        (Some(run), _) => {
            let config = config::resolve_offline(&sweep).map_err(Failure::from)?;
            let source = ttft_results::results::sources::load(run).map_err(Failure::from)?;
            let rates = ServerRates::from_records(&source.records, &format!("from {}", run.display()));
            let rates = rates.ok_or_else(|| {
                Failure::usage(format!(
                    "--from {}: no good cold measurement to take rates from",
                    run.display()
                ))
            })?;
            let model = source.records.first().map(|r| r.cell().model.clone());
            (config, Some(rates), model.or(config_model(&sweep)))
        }
        (None, Some(_)) => {
            let config = config::resolve(&sweep).map_err(Failure::from)?;
            let progress = Progress::new(0, false);
            let ctx = setup::prepare(config, None, &progress).await?;
            progress.note("calibrating the cost model (two cold requests) ...");
            let probe_s = setup::probe_seconds(&ctx).await;
            let rates = setup::calibrate_rates(&ctx, probe_s).await;
            warm_disk = ctx.warm_disk;
            (ctx.config.clone(), rates, Some(ctx.model.clone()))
        }
        (None, None) => (config::resolve_offline(&sweep).map_err(Failure::from)?, None, config_model(&sweep)),
    };
    let model = model.unwrap_or_else(|| "(the server's model)".into());
    print(&config, rates.as_ref(), &model, warm_disk, args.format)?;
    Ok(Outcome::Clean)
}

fn config_model(args: &SweepArgs) -> Option<String> {
    config::layered(args).ok().and_then(|l| l.measure.target.model)
}

fn print(
    config: &SweepConfig,
    rates: Option<&ServerRates>,
    model: &str,
    warm_disk: Option<crate::measuring::slot_files::WarmDisk>,
    format: PlanFormat,
) -> anyhow::Result<()> {
    let cells = config.matrix().cells(model);
    let (costs, total) = match rates {
        Some(r) => {
            let (costs, total) = cost::estimate(&cells, config, r);
            (costs.into_iter().map(Some).collect(), Some(total))
        }
        None => (vec![None; cells.len()], None),
    };
    match format {
        PlanFormat::Json => {
            let planned = cells
                .iter()
                .zip(&costs)
                .enumerate()
                .map(|(i, (cell, cost))| PlannedCell {
                    index: i + 1,
                    cell,
                    label: format!("{cell:#}"),
                    forecast_s: *cost,
                })
                .collect();
            let out = PlanOutput {
                plan_schema: 1,
                cells: planned,
                total_cells: cells.len(),
                forecast_s: total,
                rates,
                thermal: &config.thermal,
                warm_disk,
            };
            crate::output::println(&serde_json::to_string_pretty(&out)?)?;
        }
        PlanFormat::Table => {
            let mut text = String::new();
            let mut running = 0.0;
            for (i, (cell, cost)) in cells.iter().zip(&costs).enumerate() {
                running += cost.unwrap_or(0.0);
                let shown = cost.map_or(String::new(), |c| format!("{:>9.1} s {:>10}", c, clock(running)));
                text.push_str(&format!("{:>5}  {:<60} {shown}\n", i + 1, format!("{cell:#}")));
            }
            text.push_str(&match (total, rates) {
                (Some(t), Some(r)) => format!(
                    "{} cells, forecast {} ({})\n{}\n",
                    cells.len(),
                    clock(t),
                    r.source,
                    cost::thermal_line(&config.thermal, cells.len(), r, t)
                ),
                _ => format!(
                    "{} cells (no forecast: give --server to calibrate, or --from RUN)\n",
                    cells.len()
                ),
            });
            if let Some(disk) = warm_disk {
                text.push_str(&disk.line());
                text.push('\n');
            }
            crate::output::print(&text)?;
        }
    }
    Ok(())
}

fn clock(seconds: f64) -> String {
    humantime::format_duration(Duration::from_secs(seconds.max(0.0).round() as u64)).to_string()
}
