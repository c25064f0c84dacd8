//! `bench report --format html -o report.html`, built with the `maud` template: a value placed in
//! the page (a model name, a message, a path, a run.json value, a server's answer, a command line)
//! is HTML-escaped by the template itself, so no writer of a section can forget to escape one, and
//! markup reaches the page only where the code says `PreEscaped` (the page's fixed style and
//! script, and the SVG plots bench draws; each place says why).
//!
//! One self-contained page (inline style, a little inline script for sorting, inline SVG plots;
//! no network, no external files) with
//! - a summary (inputs, records, cells, verify's counts, the report's own notes);
//! - per model, the cell table (the terminal/markdown table's rows, `table::cell_row`) with
//!   verify's findings under the cells they concern, the staggered table, and the plots (the same
//!   SVG documents `--plot` writes);
//! - verify's findings that concern no cell of the report, and its notes (rules skipped);
//! - the metadata of every input and run, and the conflicts between sources.
//!
//! Findings come from `verify::verify_sources` on the report's inputs with verify's default
//! settings (`VerifySettings::default`; physics from each run's run.json): `bench verify INPUTS` prints the same findings.

mod cells;
mod meta;
mod page;

use maud::{Markup, html};

use self::meta::ConflictSet;
use super::CellStats;
use crate::exit::Failure;
use crate::verify;
use ttft_results::results::sources::Source;

#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// plotters failed to draw (a bug: every range is made finite before drawing).
    #[error("cannot render the plots: {0}")]
    Plot(super::plot::PlotError),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        match e {
            Error::Plot(_) => Failure::internal(e.to_string()),
        }
    }
}

/// What the page shows besides the statistics, read from the inputs before merge's rules combine
/// them (verify judges each input as it is, like the verify verb).
#[derive(Default)]
pub(crate) struct Context {
    verify: Option<verify::Report>,
    inputs: Vec<Markup>,
    conflicts: Vec<ConflictSet>,
    records: usize,
}

impl Context {
    pub(crate) fn gather(sources: &[Source<verify::Judged>]) -> Context {
        let settings = verify::VerifySettings::default();
        let report = verify::verify_sources(&settings, sources, &verify::Claims::default(), Vec::new());
        Context {
            verify: Some(report),
            inputs: sources.iter().map(meta::input_html).collect(),
            conflicts: meta::conflict_sets(sources),
            records: sources.iter().map(|s| s.records.len()).sum(),
        }
    }
}

fn models(cells: &[CellStats]) -> Vec<&str> {
    let mut models: Vec<&str> = cells.iter().map(|c| c.id.model.as_str()).collect();
    models.dedup();
    models
}

/// The page. `notes`: what the report said on stderr (duplicates set aside, partial batches).
pub(crate) fn render(cells: &[CellStats], ctx: &Context, notes: &[String]) -> Result<String, Error> {
    let plots = super::plot::render_all(cells).map_err(Error::Plot)?;
    let findings = ctx.verify.as_ref().map_or(&[][..], |r| r.findings.as_slice());
    let attached = cells::attach(findings, cells);
    let models = models(cells);
    let body = html! {
        h1 { "ttft-bench report" }
        p.sub { (models.join(", ")) }
        (summary(cells, ctx, notes))
        nav {
            a href="#cells" { "cells" }
            a href="#findings" { "other findings" }
            a href="#inputs" { "inputs" }
            a href="#conflicts" { "conflicts" }
        }
        div #cells {
            @for model in &models {
                @let mine: Vec<_> = plots.iter().filter(|p| p.model == *model).collect();
                (cells::model_section(model, cells, &attached, &mine))
            }
        }
        (other_findings(&attached.elsewhere, ctx))
        section #inputs {
            h2 { "Inputs and their runs" }
            @for input in &ctx.inputs { (input) }
        }
        section #conflicts {
            h2 { "Conflicts between sources" }
            (meta::conflicts_html(&ctx.conflicts))
        }
        footer {
            (super::table::footnote())
            "made by " (crate::meta::HARNESS_NAME) " " (crate::meta::HARNESS_VERSION)
            " (" (crate::meta::HARNESS_GIT_SHA) ")"
        }
    };
    let title = format!("ttft-bench report: {}", models.join(", "));
    Ok(page::document(&title, body))
}

fn summary(cells: &[CellStats], ctx: &Context, notes: &[String]) -> Markup {
    html! {
        p.summary {
            (cells.len()) " cells from " (ctx.records) " records in " (ctx.inputs.len()) " input(s)."
            @if let Some(s) = ctx.verify.as_ref().map(|r| &r.summary) {
                " verify: "
                span class="count error" { (s.errors) " error(s)" } ", "
                span class="count warning" { (s.warnings) " warning(s)" } ", "
                span class="count info" { (s.infos) " info" } "."
            }
        }
        @for note in notes { p.note { "note: " (note) } }
    }
}

fn other_findings(elsewhere: &[&verify::Finding], ctx: &Context) -> Markup {
    let verify_notes = ctx.verify.as_ref().map_or(&[][..], |r| r.notes.as_slice());
    html! {
        section #findings {
            h2 { "Findings about runs and files" }
            @if elsewhere.is_empty() && verify_notes.is_empty() {
                p.muted { "none: every finding concerns a cell above" }
            }
            @if !elsewhere.is_empty() {
                ul.findings {
                    @for f in elsewhere {
                        li class={ "finding " (cells::severity_class(f.severity)) } { (cells::finding_html(f)) }
                    }
                }
            }
            @for note in verify_notes { p.note { "note: " (note) } }
        }
    }
}
