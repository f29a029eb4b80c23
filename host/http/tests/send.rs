//! The HTTP primitive against a real HTTP server on a local socket.

use std::net::{IpAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rye_http::{HttpError, Private, Request, send};
use rye_test_artifacts::http_server::{Server, answer};

fn request(url: String) -> Request {
    Request {
        method: "GET".into(),
        url,
        headers: Vec::new(),
        body: None,
        timeout: Some(Duration::from_secs(10)),
        max_response_bytes: None,
        max_redirects: None,
        retry: None,
        private: Private::Allowed,
    }
}

fn local() -> Private {
    Private::Only(vec!["127.0.0.1".parse::<IpAddr>().unwrap()])
}

#[tokio::test]
async fn a_json_answer_with_its_status_and_headers() {
    let server = Server::start(|seen, _| {
        let body = format!(
            "{{\"method\":\"{}\",\"got\":{}}}",
            seen.method,
            String::from_utf8_lossy(&seen.body)
        );
        answer(
            "201 Created",
            &[("Content-Type", "application/json"), ("X-Seen", "yes")],
            body.as_bytes(),
        )
    });
    let response = send(&Request {
        method: "POST".into(),
        headers: vec![
            ("Content-Type".into(), "application/json".into()),
            ("X-API-Key".into(), "k1".into()),
        ],
        body: Some(br#"{"a":1}"#.to_vec()),
        private: local(),
        ..request(server.url("/items?x=1"))
    })
    .await
    .unwrap();
    assert_eq!(response.status, 201);
    assert_eq!(response.reason, Some("Created"));
    assert_eq!(response.header("x-seen"), Some("yes"));
    assert_eq!(response.body, br#"{"method":"POST","got":{"a":1}}"#);
    assert_eq!((response.attempts, response.redirects), (1, 0));
    let seen = &server.seen()[0];
    assert_eq!(seen.path, "/items?x=1");
    assert_eq!(seen.header("x-api-key"), Some("k1"));
    assert!(seen.header("user-agent").unwrap().starts_with("rye/"));
}

#[tokio::test]
async fn private_addresses_are_refused_unless_allowed() {
    let server = Server::start(|_, _| answer("200 OK", &[], b"inside"));
    for url in [
        server.url("/"),
        format!("http://localhost:{}/", server.port),
        format!("http://[::ffff:127.0.0.1]:{}/", server.port),
        format!("http://2130706433:{}/", server.port),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        "http://10.0.0.1/".to_owned(),
    ] {
        let refused = send(&Request {
            private: Private::Refused,
            ..request(url.clone())
        })
        .await
        .unwrap_err();
        assert!(
            matches!(refused, HttpError::Refused { .. }),
            "{url}: {refused:?}"
        );
        assert!(refused.to_string().contains("allow_private_addresses"));
    }
    assert!(server.seen().is_empty(), "nothing reached the server");
    // Listed, the address is reached; others stay refused.
    let inside = send(&Request {
        private: local(),
        ..request(server.url("/"))
    })
    .await
    .unwrap();
    assert_eq!(inside.body, b"inside");
    let metadata = send(&Request {
        private: local(),
        ..request("http://169.254.169.254/".into())
    })
    .await
    .unwrap_err();
    assert!(
        matches!(&metadata, HttpError::Refused { reason, .. } if reason.contains("link-local")),
        "{metadata:?}"
    );
}

#[tokio::test]
async fn redirects_are_checked_hop_by_hop_and_credentials_stay_home() {
    let server = Server::start(|seen, port| match seen.path.as_str() {
        "/same" => answer("302 Found", &[("Location", "/landing")], b""),
        "/other" => answer(
            "307 Temporary Redirect",
            &[("Location", &format!("http://localhost:{port}/landing"))],
            b"",
        ),
        "/see-other" => answer("303 See Other", &[("Location", "/landing")], b""),
        "/metadata" => answer(
            "302 Found",
            &[("Location", "http://169.254.169.254/latest/")],
            b"",
        ),
        "/file" => answer("302 Found", &[("Location", "file:///etc/passwd")], b""),
        "/loop" => answer("302 Found", &[("Location", "/loop")], b""),
        _ => answer("200 OK", &[], seen.method.as_bytes()),
    });
    let with_credentials = |path: &str| Request {
        method: "POST".into(),
        headers: vec![
            ("Authorization".into(), "Bearer t0ken".into()),
            ("X-API-Key".into(), "k1".into()),
            ("Accept".into(), "text/plain".into()),
        ],
        body: Some(b"payload".to_vec()),
        private: Private::Allowed,
        ..request(server.url(path))
    };

    let same = send(&with_credentials("/same")).await.unwrap();
    assert_eq!((same.status, same.redirects), (200, 1));
    let landed = server.seen().last().cloned().unwrap();
    assert_eq!(landed.header("authorization"), Some("Bearer t0ken"));
    assert_eq!(landed.method, "GET", "a 302 after a POST continues as GET");
    assert!(landed.body.is_empty());

    let other = send(&with_credentials("/other")).await.unwrap();
    assert!(other.url.starts_with("http://localhost:"), "{}", other.url);
    let landed = server.seen().last().cloned().unwrap();
    assert_eq!(landed.header("authorization"), None);
    assert_eq!(landed.header("x-api-key"), None);
    assert_eq!(landed.header("accept"), Some("text/plain"));
    assert_eq!(landed.method, "POST", "a 307 keeps the method and body");
    assert_eq!(landed.body, b"payload");

    send(&with_credentials("/see-other")).await.unwrap();
    assert_eq!(server.seen().last().unwrap().method, "GET");

    let to_metadata = send(&Request {
        private: local(),
        ..request(server.url("/metadata"))
    })
    .await
    .unwrap_err();
    assert!(
        matches!(&to_metadata, HttpError::Refused { address, .. } if address == "169.254.169.254"),
        "{to_metadata:?}"
    );
    let to_file = send(&request(server.url("/file"))).await.unwrap_err();
    assert!(
        matches!(&to_file, HttpError::BadRedirect { reason, .. } if reason.contains("\"file\"")),
        "{to_file:?}"
    );
    let looped = send(&Request {
        max_redirects: Some(3),
        ..request(server.url("/loop"))
    })
    .await
    .unwrap_err();
    assert!(
        matches!(looped, HttpError::TooManyRedirects { limit: 3, .. }),
        "{looped:?}"
    );
    let unfollowed = send(&Request {
        max_redirects: Some(0),
        ..request(server.url("/loop"))
    })
    .await
    .unwrap();
    assert_eq!(
        (unfollowed.status, unfollowed.header("location")),
        (302, Some("/loop"))
    );
}

#[tokio::test]
async fn limits_on_time_and_size_hold() {
    let server = Server::start(|seen, _| match seen.path.as_str() {
        "/slow" => {
            std::thread::sleep(Duration::from_secs(5));
            answer("200 OK", &[], b"late")
        }
        "/big" => answer("200 OK", &[], &vec![b'x'; 5000]),
        "/chunked" => {
            let mut out =
                b"HTTP/1.1 200 OK\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"
                    .to_vec();
            for _ in 0..10 {
                out.extend_from_slice(b"3e8\r\n");
                out.extend_from_slice(&[b'y'; 1000]);
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"0\r\n\r\n");
            out
        }
        _ => answer("200 OK", &[], b"ok"),
    });
    let started = Instant::now();
    let late = send(&Request {
        timeout: Some(Duration::from_millis(300)),
        ..request(server.url("/slow"))
    })
    .await
    .unwrap_err();
    assert_eq!(late, HttpError::Timeout(Duration::from_millis(300)));
    assert!(started.elapsed() < Duration::from_secs(3));

    let big = send(&Request {
        max_response_bytes: Some(4096),
        ..request(server.url("/big"))
    })
    .await
    .unwrap_err();
    assert_eq!(
        big,
        HttpError::TooLarge {
            limit: 4096,
            announced: Some(5000)
        }
    );
    let streamed = send(&Request {
        max_response_bytes: Some(4096),
        ..request(server.url("/chunked"))
    })
    .await
    .unwrap_err();
    assert_eq!(
        streamed,
        HttpError::TooLarge {
            limit: 4096,
            announced: None
        }
    );
    let whole = send(&request(server.url("/chunked"))).await.unwrap();
    assert_eq!(whole.body.len(), 10_000);
}

#[tokio::test]
async fn retries_follow_busy_answers_and_failed_connections() {
    let count = Arc::new(Mutex::new(0));
    let counter = count.clone();
    let server = Server::start(move |_, _| {
        let mut n = counter.lock().unwrap();
        *n += 1;
        if *n < 3 {
            answer("503 Service Unavailable", &[], b"busy")
        } else {
            answer("200 OK", &[], b"done")
        }
    });
    let done = send(&Request {
        retry: Some((3, Duration::from_millis(10))),
        ..request(server.url("/"))
    })
    .await
    .unwrap();
    assert_eq!(
        (done.status, done.attempts, &done.body[..]),
        (200, 3, &b"done"[..])
    );

    *count.lock().unwrap() = 0;
    let busy = send(&Request {
        retry: Some((2, Duration::from_millis(10))),
        ..request(server.url("/"))
    })
    .await
    .unwrap();
    assert_eq!(
        (busy.status, busy.attempts),
        (503, 2),
        "the last answer stands"
    );

    let closed = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let refused = send(&Request {
        retry: Some((2, Duration::from_millis(10))),
        ..request(format!("http://127.0.0.1:{closed}/"))
    })
    .await
    .unwrap_err();
    assert!(
        matches!(&refused, HttpError::Transport { message, .. } if message.to_lowercase().contains("connect")),
        "{refused:?}"
    );
}

#[tokio::test]
async fn malformed_requests_are_refused_before_sending() {
    for (bad, expect) in [
        (
            Request {
                headers: vec![("X-Evil".into(), "a\r\nHost: evil".into())],
                ..request("http://127.0.0.1:9/".into())
            },
            "X-Evil",
        ),
        (
            Request {
                method: "GE T".into(),
                ..request("http://127.0.0.1:9/".into())
            },
            "not an HTTP method",
        ),
        (request("ftp://example.test/".into()), "\"ftp\""),
        (request("not a url".into()), "is not a URL"),
    ] {
        let error = send(&bad).await.unwrap_err();
        assert!(
            matches!(&error, HttpError::Invalid(message) if message.contains(expect)),
            "{expect}: {error:?}"
        );
    }
}
