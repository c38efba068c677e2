//! s3s-fs 0.14.1 as an S3 server for bench/compare.py, with TCP_NODELAY on every connection.
//!
//! The stock `s3s-fs` binary accepts sockets with Nagle's algorithm on. A GET response goes
//! out as two writes (headers, then the streamed body); the second small write waits for the
//! client's delayed ACK, so a 1 KiB GET took 15-40 ms on loopback while a PUT took under one:
//! every client's small-GET figure measured that timer. This server is the same store
//! (`s3s_fs::FileSystem`, `SimpleAuth`, path-style requests) behind an accept loop that turns
//! Nagle off.
//!
//! Usage: s3s-server [--host H] [--port P] [--access-key K --secret-key S] ROOT

use std::error::Error;
use std::path::PathBuf;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use s3s::auth::SimpleAuth;
use s3s::service::S3ServiceBuilder;
use tokio::net::TcpListener;

struct Options {
    host: String,
    port: u16,
    credentials: Option<(String, String)>,
    root: PathBuf,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Options, String> {
    let (mut host, mut port) = ("localhost".to_owned(), 8014);
    let (mut key, mut secret, mut root) = (None, None, None);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--host" => host = value()?,
            "--port" => port = value()?.parse().map_err(|e| format!("--port: {e}"))?,
            "--access-key" => key = Some(value()?),
            "--secret-key" => secret = Some(value()?),
            flag if flag.starts_with("--") => return Err(format!("unknown option {flag}")),
            _ if root.is_none() => root = Some(PathBuf::from(&arg)),
            _ => return Err(format!("unexpected argument {arg}")),
        }
    }
    let credentials = match (key, secret) {
        (Some(k), Some(s)) => Some((k, s)),
        (None, None) => None,
        _ => return Err("--access-key and --secret-key go together".to_owned()),
    };
    let root = root.ok_or("the root directory is missing")?;
    Ok(Options { host, port, credentials, root })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let opt = parse(std::env::args().skip(1)).map_err(|e| {
        format!("{e}\nusage: s3s-server [--host H] [--port P] [--access-key K --secret-key S] ROOT")
    })?;
    let store = s3s_fs::FileSystem::new(&opt.root).map_err(|e| format!("{}: {e:?}", opt.root.display()))?;
    let mut builder = S3ServiceBuilder::new(store);
    if let Some((key, secret)) = opt.credentials {
        builder.set_auth(SimpleAuth::from_single(key, secret));
    }
    let service = builder.build();

    let listener = TcpListener::bind((opt.host.as_str(), opt.port)).await?;
    println!("listening on http://{}", listener.local_addr()?);
    let http = Builder::new(TokioExecutor::new());
    loop {
        let socket = match listener.accept().await {
            Ok((socket, _)) => socket,
            Err(err) => {
                eprintln!("accept: {err}");
                continue;
            }
        };
        // The point of this server: headers and body leave at once, not one delayed ACK apart.
        if let Err(err) = socket.set_nodelay(true) {
            eprintln!("set_nodelay: {err}");
        }
        let conn = http.serve_connection(TokioIo::new(socket), service.clone()).into_owned();
        tokio::spawn(async move {
            let _ = conn.await;
        });
    }
}
