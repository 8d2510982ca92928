//! A credential service for tests: an HTTP server on 127.0.0.1 that gives
//! each request to a function, on a thread per connection, so that one
//! request held on a gate does not hold up the others.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use aws_smithy_types::DateTime;
use aws_smithy_types::date_time::Format;

/// One request: its method, path and order (1 for the first).
#[derive(Debug, Clone)]
pub(crate) struct Asked {
    pub method: String,
    pub path: String,
    pub n: usize,
}

/// An answer: status and body, or `None` to close the connection without
/// one.
pub(crate) type Answer = Option<(u16, String)>;

pub(crate) struct Service {
    addr: SocketAddr,
    asked: Arc<Mutex<Vec<Asked>>>,
    stop: Arc<AtomicBool>,
}

impl Service {
    pub fn new(answer: impl Fn(&Asked) -> Answer + Send + Sync + 'static) -> Service {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let answer = Arc::new(answer);
        let (log, stopped) = (asked.clone(), stop.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopped.load(SeqCst) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                let (answer, log) = (answer.clone(), log.clone());
                std::thread::spawn(move || serve(stream, &*answer, &log));
            }
        });
        Service { addr, asked, stop }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn asked(&self) -> Vec<Asked> {
        self.asked.lock().unwrap().clone()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.stop.store(true, SeqCst);
        // Wakes the accepting thread, which then ends.
        let _ = TcpStream::connect(self.addr);
    }
}

fn serve(stream: TcpStream, answer: &dyn Fn(&Asked) -> Answer, log: &Mutex<Vec<Asked>>) {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let mut length = 0;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).unwrap_or(0) == 0 || header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    // The body is read so that closing sends no reset before the answer.
    let _ = reader.by_ref().take(length).read_to_end(&mut Vec::new());
    let asked = {
        let mut log = log.lock().unwrap();
        let asked = Asked {
            method: method.into(),
            path: path.into(),
            n: log.len() + 1,
        };
        log.push(asked.clone());
        asked
    };
    if let Some((status, body)) = answer(&asked) {
        let mut stream = reader.into_inner();
        let _ = write!(
            stream,
            "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
    }
}

/// A request held until the test lets it go: [`Gate::hold`] (on the
/// service's thread) tells [`Gate::arrived`] and waits for [`Gate::open`].
pub(crate) struct Gate {
    arrived: (Mutex<Sender<()>>, Mutex<Receiver<()>>),
    /// Dropped to open: every wait on the receiver then ends.
    open: (Mutex<Option<Sender<()>>>, Mutex<Receiver<()>>),
}

impl Gate {
    pub fn new() -> Arc<Gate> {
        let ((a_tx, a_rx), (o_tx, o_rx)) = (channel(), channel());
        Arc::new(Gate {
            arrived: (Mutex::new(a_tx), Mutex::new(a_rx)),
            open: (Mutex::new(Some(o_tx)), Mutex::new(o_rx)),
        })
    }

    pub fn hold(&self) {
        let _ = self.arrived.0.lock().unwrap().send(());
        let _ = self.open.1.lock().unwrap().recv();
    }

    /// Waits for a request to be held (a minute at most: a test that gets
    /// none fails rather than hangs).
    pub fn arrived(&self) {
        self.arrived
            .1
            .lock()
            .unwrap()
            .recv_timeout(Duration::from_secs(60))
            .expect("no request came to the gate");
    }

    /// Lets every held request (and any to come) go.
    pub fn open(&self) {
        self.open.0.lock().unwrap().take();
    }
}

/// The container (and instance) services' JSON for keys named `token`,
/// expiring at `expires`.
pub(crate) fn json_keys(token: &str, expires: SystemTime) -> Answer {
    let expires = DateTime::from(expires).fmt(Format::DateTime).unwrap();
    Some((
        200,
        format!(
            r#"{{"Code":"Success","AccessKeyId":"ASIA{token}","SecretAccessKey":"s","Token":"{token}","Expiration":"{expires}"}}"#
        ),
    ))
}

/// An hour from now.
pub(crate) fn in_an_hour() -> SystemTime {
    SystemTime::now() + Duration::from_secs(3600)
}
