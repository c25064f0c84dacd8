//! `bench report --format html -o report.html`: one self-contained page (inline style, a little
//! inline script for sorting, inline SVG plots; no network, no external files) with
//! - a summary (inputs, records, cells, verify's counts, the report's own notes);
//! - per model, the cell table (the terminal/markdown table's rows, `table::cell_row`) with
//!   verify's findings under the cells they concern, the staggered table, and the plots (the same
//!   SVG documents `--plot` writes);
//! - verify's findings that concern no cell of the report, and its notes (rules skipped);
//! - the metadata of every input and run, and the conflicts between sources.
//!
//! Findings come from `verify::verify_sources` on the report's inputs with verify's default
//! settings (`VerifySettings::default`; physics from each run's run.json): `bench verify INPUTS` prints the same findings.
//! Every string from an input is escaped (`page::esc`).

mod cells;
mod meta;
mod page;

use self::meta::ConflictSet;
use self::page::{el, esc};
use super::CellStats;
use crate::exit::Failure;
use crate::results::sources::Source;
use crate::verify;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}: cannot read its conflicts: {1}")]
    Conflicts(String, String),
    /// plotters failed to draw (a bug: every range is made finite before drawing).
    #[error("cannot render the plots: {0}")]
    Plot(super::plot::PlotError),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        match e {
            Error::Conflicts(..) => Failure::usage(e.to_string()),
            Error::Plot(_) => Failure::internal(e.to_string()),
        }
    }
}

/// What the page shows besides the statistics, read from the inputs before merge's rules combine
/// them (verify judges each input as it is, like the verify verb).
#[derive(Default)]
pub struct Context {
    verify: Option<verify::Report>,
    inputs: Vec<String>,
    conflicts: Vec<ConflictSet>,
    records: usize,
}

impl Context {
    pub fn gather(sources: &[Source]) -> Result<Context, Error> {
        let report = verify::verify_sources(&verify::VerifySettings::default(), sources, &[]);
        Ok(Context {
            verify: Some(report),
            inputs: sources.iter().map(meta::input_html).collect(),
            conflicts: meta::conflict_sets(sources)?,
            records: sources.iter().map(|s| s.records.len()).sum(),
        })
    }
}

fn models(cells: &[CellStats]) -> Vec<&str> {
    let mut models: Vec<&str> = cells.iter().map(|c| c.id.model.as_str()).collect();
    models.dedup();
    models
}

/// The page. `notes`: what the report said on stderr (duplicates set aside, partial batches).
pub fn render(cells: &[CellStats], ctx: &Context, notes: &[String]) -> Result<String, Error> {
    let plots = super::plot::render_all(cells).map_err(Error::Plot)?;
    let findings = ctx.verify.as_ref().map_or(&[][..], |r| r.findings.as_slice());
    let attached = cells::attach(findings, cells);
    let models = models(cells);
    let mut body = String::new();
    body.push_str(&el("h1", "ttft-bench report"));
    body.push_str(&format!("\n<p class=\"sub\">{}</p>\n", esc(&models.join(", "))));
    body.push_str(&summary(cells, ctx, notes));
    body.push_str(
        "<nav><a href=\"#cells\">cells</a><a href=\"#findings\">other findings</a>\
         <a href=\"#inputs\">inputs</a><a href=\"#conflicts\">conflicts</a></nav>\n",
    );
    body.push_str("<div id=\"cells\">\n");
    for model in &models {
        let mine: Vec<_> = plots.iter().filter(|p| p.model == *model).collect();
        body.push_str(&cells::model_section(model, cells, &attached, &mine));
    }
    body.push_str("</div>\n");
    body.push_str(&other_findings(&attached.elsewhere, ctx));
    body.push_str("<section id=\"inputs\">\n<h2>Inputs and their runs</h2>\n");
    body.extend(ctx.inputs.iter().map(String::as_str));
    body.push_str("</section>\n<section id=\"conflicts\">\n<h2>Conflicts between sources</h2>\n");
    body.push_str(&meta::conflicts_html(&ctx.conflicts));
    body.push_str("</section>\n");
    body.push_str(&format!(
        "<footer>{}made by {} {} ({})</footer>",
        esc(&super::table::footnote()),
        crate::meta::HARNESS_NAME,
        crate::meta::HARNESS_VERSION,
        esc(crate::meta::HARNESS_GIT_SHA)
    ));
    let title = format!("ttft-bench report: {}", models.join(", "));
    Ok(page::document(&title, &body))
}

fn summary(cells: &[CellStats], ctx: &Context, notes: &[String]) -> String {
    let mut out = format!(
        "<p class=\"summary\">{} cells from {} records in {} input(s).",
        cells.len(),
        ctx.records,
        ctx.inputs.len()
    );
    if let Some(s) = ctx.verify.as_ref().map(|r| &r.summary) {
        out.push_str(&format!(
            " verify: <span class=\"count error\">{} error(s)</span>, <span class=\"count warning\">{} warning(s)</span>, \
             <span class=\"count info\">{} info</span>.",
            s.errors, s.warnings, s.infos
        ));
    }
    out.push_str("</p>\n");
    for note in notes {
        out.push_str(&format!("<p class=\"note\">note: {}</p>\n", esc(note)));
    }
    out
}

fn other_findings(elsewhere: &[&verify::Finding], ctx: &Context) -> String {
    let mut out = String::from("<section id=\"findings\">\n<h2>Findings about runs and files</h2>\n");
    let verify_notes = ctx.verify.as_ref().map_or(&[][..], |r| r.notes.as_slice());
    if elsewhere.is_empty() && verify_notes.is_empty() {
        out.push_str("<p class=\"muted\">none: every finding concerns a cell above</p>\n");
    }
    if !elsewhere.is_empty() {
        out.push_str("<ul class=\"findings\">\n");
        for f in elsewhere {
            let class = cells::severity_class(f.severity);
            out.push_str(&format!("<li class=\"finding {class}\">{}</li>\n", cells::finding_html(f)));
        }
        out.push_str("</ul>\n");
    }
    for note in verify_notes {
        out.push_str(&format!("<p class=\"note\">note: {}</p>\n", esc(note)));
    }
    out.push_str("</section>\n");
    out
}
