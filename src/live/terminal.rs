//! The terminal under a live view: the alternate screen (so the shell's screen comes back as it
//! was), the cursor hidden, and keys read one at a time without echo. Ctrl-C is left to the
//! terminal (ISIG stays on), so it still sends SIGINT as it does without a view; only canonical
//! input and echo are turned off, which is all reading `q` at once needs, and output keeps its
//! newline translation, so a line printed by anything else stays a line.
//!
//! `restore` undoes all of it, once, from wherever it is called first: the view's thread when it
//! ends, `View::finish`, or the panic hook installed with the first view (a panic anywhere then
//! leaves a usable shell and prints its message on the normal screen).

use std::io::{IsTerminal, Stderr, Write};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nix::sys::signal::{self, Signal};
use nix::sys::termios::{self, LocalFlags, SetArg, SpecialCharacterIndices, Termios};
use nix::unistd::Pid;
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::{cursor, event, execute, terminal};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Style};
use ratatui::text::Line;
use ratatui::widgets::{Gauge, Paragraph};

/// The terminal's settings before the view changed them: (the tty, its termios).
static SAVED: Mutex<Option<(std::fs::File, Termios)>> = Mutex::new(None);
/// The alternate screen is up (and the cursor hidden).
static ENTERED: AtomicBool = AtomicBool::new(false);
static HOOK: std::sync::Once = std::sync::Once::new();

/// Whether a view can be drawn: stderr is a terminal.
pub(crate) fn is_terminal() -> bool {
    std::io::stderr().is_terminal()
}

pub(crate) struct Screen {
    terminal: Terminal<CrosstermBackend<Stderr>>,
    /// Keys can be read (a controlling terminal exists).
    keys: bool,
}

impl Screen {
    pub(crate) fn enter() -> std::io::Result<Screen> {
        HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                restore();
                previous(info);
            }));
        });
        let keys = keys_without_echo();
        execute!(std::io::stderr(), terminal::EnterAlternateScreen, cursor::Hide)?;
        ENTERED.store(true, Ordering::SeqCst);
        let terminal = Terminal::new(CrosstermBackend::new(std::io::stderr()))?;
        Ok(Screen { terminal, keys })
    }

    /// Waits up to `wait` for a key; true when it was `q`.
    pub(crate) fn stop_key(&mut self, wait: Duration) -> bool {
        if !self.keys {
            std::thread::sleep(wait);
            return false;
        }
        match event::poll(wait) {
            Ok(true) => matches!(
                event::read(),
                Ok(event::Event::Key(k)) if k.kind == event::KeyEventKind::Press
                    && matches!(k.code, event::KeyCode::Char('q' | 'Q'))
            ),
            Ok(false) => false,
            Err(_) => {
                // No keys to read after all: the view goes on without them.
                self.keys = false;
                false
            }
        }
    }

    /// Draws `lines` with the gauge under the first one; lines that do not fit are counted.
    pub(crate) fn draw(&mut self, lines: &[String], gauge: Option<(f64, String)>) {
        let _ = self.terminal.draw(|f| {
            let [title, bar, rest] =
                Layout::vertical([Constraint::Length(1), Constraint::Length(1), Constraint::Min(0)])
                    .areas(f.area());
            f.render_widget(Paragraph::new(lines.first().cloned().unwrap_or_default()), title);
            if let Some((share, label)) = gauge {
                let g =
                    Gauge::default().gauge_style(Style::default().fg(Color::Cyan)).ratio(share).label(label);
                f.render_widget(g, bar);
            }
            let body = fit(lines.get(1..).unwrap_or_default(), rest.height as usize);
            f.render_widget(Paragraph::new(body.into_iter().map(Line::from).collect::<Vec<_>>()), rest);
        });
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
    }
}

/// `lines` cut to `height`: the first ones, a count of those left out, and the last (the keys).
fn fit(lines: &[String], height: usize) -> Vec<String> {
    if lines.len() <= height {
        return lines.to_vec();
    }
    if height < 3 {
        return lines.iter().take(height).cloned().collect();
    }
    let mut out: Vec<String> = lines[..height - 2].to_vec();
    out.push(format!("... {} more lines (a taller terminal shows them)", lines.len() - (height - 1)));
    out.extend(lines.last().cloned());
    out
}

/// Turns off canonical input and echo on the controlling terminal, saving its settings; false
/// when there is none to read keys from.
fn keys_without_echo() -> bool {
    let Ok(tty) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/tty") else { return false };
    let Ok(saved) = termios::tcgetattr(&tty) else { return false };
    let mut keys = saved.clone();
    keys.local_flags.remove(LocalFlags::ICANON | LocalFlags::ECHO);
    keys.control_chars[SpecialCharacterIndices::VMIN as usize] = 1;
    keys.control_chars[SpecialCharacterIndices::VTIME as usize] = 0;
    if termios::tcsetattr(&tty, SetArg::TCSANOW, &keys).is_err() {
        return false;
    }
    *SAVED.lock().unwrap_or_else(|p| p.into_inner()) = Some((tty, saved));
    true
}

/// Puts the terminal back as it was: the normal screen, the cursor, canonical input and echo.
/// Safe to call any number of times, from any thread.
pub(crate) fn restore() {
    if ENTERED.swap(false, Ordering::SeqCst) {
        let mut err = std::io::stderr();
        let _ = execute!(err, cursor::Show, terminal::LeaveAlternateScreen);
        let _ = err.flush();
    }
    let saved = SAVED.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some((tty, termios)) = saved {
        // The tty closes as it drops, once.
        let _ = termios::tcsetattr(&tty, SetArg::TCSANOW, &termios);
    }
}

/// `q`: the same SIGINT Ctrl-C sends, to this process alone, so the run stops by its one path.
pub(crate) fn interrupt_self() {
    let _ = signal::kill(Pid::this(), Signal::SIGINT);
}
