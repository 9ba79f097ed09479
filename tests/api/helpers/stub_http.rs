//! A small HTTP server of a test's own (an identity provider's JWKS, a drand
//! relay): one request per connection; `answer` gets the request's head and gives
//! the status line's code and reason and a JSON body.
use std::sync::Arc;

/// Serves on a free loopback port until the returned task is aborted; its URL.
pub async fn serve<F>(answer: F) -> (String, tokio::task::JoinHandle<()>)
where
    F: Fn(&str) -> (&'static str, String) + Send + Sync + 'static,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let answer = Arc::new(answer);
    let task = tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let (status, body) = answer(&String::from_utf8_lossy(&head));
                let reply = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(reply.as_bytes()).await;
            });
        }
    });
    (url, task)
}
