//! The node's immutable bytes in an object store (`object_store`: local
//! files here, any S3 API with its `aws` feature), as the store of blobs
//! and objects `rye-cas` reads and writes.
//!
//! Every key is written with the bytes its hash names, so nothing here
//! needs a conditional write: a store that overwrites a key writes the
//! same bytes again, and every read is checked against its hash by
//! `rye-cas`. A key already holding as many bytes as a write brings is
//! not written again (writing is what costs; a key cut short by a crash
//! holds fewer and is written whole). Whether a principal holds an object
//! is the database's to answer; the store is asked only for the bytes.

use std::io;
use std::sync::Arc;

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt as _, PutPayload};

/// An object store as a `rye-cas` storage.
#[derive(Debug, Clone)]
pub struct ObjectBytes {
    store: Arc<dyn ObjectStore>,
}

impl ObjectBytes {
    pub fn new(store: Arc<dyn ObjectStore>) -> Self {
        Self { store }
    }

    /// Local files under `root` (made if missing).
    pub fn local(root: &std::path::Path) -> io::Result<Self> {
        std::fs::create_dir_all(root)?;
        let store = object_store::local::LocalFileSystem::new_with_prefix(root)
            .map_err(io::Error::other)?;
        Ok(Self::new(Arc::new(store)))
    }

    /// The store `url` names: `file:///PATH` (local files) or
    /// `s3://BUCKET[/PREFIX]`, any S3 API, set up by the `AWS_*`
    /// variables of the environment (`AWS_ENDPOINT_URL`,
    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
    /// `AWS_ALLOW_HTTP`, ...) and then by `options`, the same settings by
    /// their lower-case names (`aws_endpoint`, ...). Requests address the
    /// bucket by path unless `aws_virtual_hosted_style_request` says
    /// otherwise, as servers other than AWS's expect.
    pub fn connect(url: &str, options: &[(String, String)]) -> io::Result<Self> {
        let invalid = |message: String| io::Error::new(io::ErrorKind::InvalidInput, message);
        if let Some(path) = url.strip_prefix("file://") {
            if !path.starts_with('/') {
                return Err(invalid(format!(
                    "the object store {url:?}: a file:// store names an absolute path"
                )));
            }
            return Self::local(std::path::Path::new(path));
        }
        let Some(rest) = url.strip_prefix("s3://") else {
            return Err(invalid(format!(
                "the object store {url:?} is neither file:///PATH nor s3://BUCKET[/PREFIX]"
            )));
        };
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(invalid(format!("the object store {url:?} names no bucket")));
        }
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
        if std::env::var_os("AWS_REGION").is_none()
            && std::env::var_os("AWS_DEFAULT_REGION").is_none()
        {
            builder = builder.with_region("us-east-1");
        }
        for (key, value) in options {
            let key = key
                .parse::<object_store::aws::AmazonS3ConfigKey>()
                .map_err(|e| invalid(format!("the object store's setting {key:?}: {e}")))?;
            builder = builder.with_config(key, value);
        }
        let store = builder
            .build()
            .map_err(|e| invalid(format!("the object store {url:?}: {e}")))?;
        let prefix = prefix.trim_matches('/');
        Ok(if prefix.is_empty() {
            Self::new(Arc::new(store))
        } else {
            let prefix = Path::parse(prefix)
                .map_err(|e| invalid(format!("the object store {url:?}: {e}")))?;
            Self::new(Arc::new(object_store::prefix::PrefixStore::new(
                store, prefix,
            )))
        })
    }

    /// Writes, reads back and deletes one key: whether the store answers
    /// as a node needs, for a node starting and for `rye node doctor`.
    pub async fn check(&self) -> io::Result<()> {
        let key = format!("check/{}", hex::encode(rand_bytes()));
        let at = location(&key)?;
        self.store
            .put(&at, PutPayload::from(b"rye".to_vec()))
            .await
            .map_err(io::Error::other)?;
        let read = self
            .store
            .get(&at)
            .await
            .map_err(io::Error::other)?
            .bytes()
            .await
            .map_err(io::Error::other)?;
        self.store.delete(&at).await.map_err(io::Error::other)?;
        if read.as_ref() != b"rye" {
            return Err(io::Error::other(format!(
                "the object store gave back {} bytes for the 3 written",
                read.len()
            )));
        }
        Ok(())
    }
}

fn rand_bytes() -> [u8; 8] {
    let mut bytes = [0; 8];
    getrandom::fill(&mut bytes).expect("the system's random source");
    bytes
}

fn location(key: &str) -> io::Result<Path> {
    Path::parse(key).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
}

impl rye_cas::Storage for ObjectBytes {
    async fn get(&self, key: &str) -> io::Result<Option<Vec<u8>>> {
        match self.store.get(&location(key)?).await {
            Ok(found) => Ok(Some(
                found.bytes().await.map_err(io::Error::other)?.to_vec(),
            )),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(io::Error::other(e)),
        }
    }

    async fn put(&self, key: &str, bytes: &[u8]) -> io::Result<()> {
        let at = location(key)?;
        match self.store.head(&at).await {
            Ok(meta) if meta.size == bytes.len() as u64 => return Ok(()),
            Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(io::Error::other(e)),
        }
        self.store
            .put(&at, PutPayload::from(bytes.to_vec()))
            .await
            .map(|_| ())
            .map_err(io::Error::other)
    }

    async fn exists(&self, key: &str) -> io::Result<bool> {
        match self.store.head(&location(key)?).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(io::Error::other(e)),
        }
    }

    async fn delete(&self, key: &str) -> io::Result<()> {
        match self.store.delete(&location(key)?).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(io::Error::other(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rye_cas::Cas;
    use serde_json::json;

    #[tokio::test]
    async fn blobs_and_objects_round_trip_and_a_damaged_one_is_caught() {
        let dir = tempfile::tempdir().unwrap();
        let cas = Cas::new(ObjectBytes::local(dir.path()).unwrap());
        let blob = cas.put_blob(b"hello\n").await.unwrap();
        assert_eq!(cas.get_blob(&blob).await.unwrap().unwrap(), b"hello\n");
        let mut fields = serde_json::Map::new();
        fields.insert("n".into(), json!(1));
        let object = cas
            .put_object(&rye_cas::object("note", fields))
            .await
            .unwrap();
        assert_eq!(cas.get_object(&object).await.unwrap().unwrap()["n"], 1);
        assert_eq!(cas.has(&blob).await.unwrap(), Some(rye_cas::Class::Blob));
        let absent = rye_cas::ContentHash::of(b"absent");
        assert_eq!(cas.get_blob(&absent).await.unwrap(), None);
        assert_eq!(cas.has(&absent).await.unwrap(), None);

        // A key cut short (a write a crash interrupted) is written whole
        // by the next put; a whole one is left as it is.
        let file = dir.path().join(rye_cas::Class::Blob.key(&blob));
        std::fs::write(&file, b"hel").unwrap();
        cas.put_blob(b"hello\n").await.unwrap();
        assert_eq!(cas.get_blob(&blob).await.unwrap().unwrap(), b"hello\n");
        let written = std::fs::metadata(&file).unwrap().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        cas.put_blob(b"hello\n").await.unwrap();
        assert_eq!(
            std::fs::metadata(&file).unwrap().modified().unwrap(),
            written
        );

        // Bytes changed in the store behind the node's back.
        std::fs::write(&file, b"tampered").unwrap();
        assert!(cas.get_blob(&blob).await.is_err());
        cas.delete(rye_cas::Class::Blob, &blob).await.unwrap();
        cas.delete(rye_cas::Class::Blob, &blob).await.unwrap();
        assert_eq!(cas.get_blob(&blob).await.unwrap(), None);
    }

    #[tokio::test]
    async fn the_sync_exchange_runs_over_it() {
        let dir = tempfile::tempdir().unwrap();
        let cas = Cas::new(ObjectBytes::local(dir.path()).unwrap());
        let hash = rye_cas::ContentHash::of(b"x");
        let data = base64_of(b"x");
        let stored = rye_sync::objects::put(
            &cas,
            &json!({"entries": [{"hash": hash.hex(), "kind": "blob", "data": data}]}),
        )
        .await
        .unwrap();
        assert_eq!(stored["stored"][0], hash.hex());
        let got = rye_sync::objects::get(&cas, &json!({"hashes": [hash.hex()]}))
            .await
            .unwrap();
        assert_eq!(got["entries"][0]["data"], data);
    }

    fn base64_of(bytes: &[u8]) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }
}
