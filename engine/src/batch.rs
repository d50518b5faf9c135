//! Write batches: puts and deletes applied atomically, across collections.

/// One operation of a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchOp {
    Put {
        collection: String,
        key: Vec<u8>,
        value: Vec<u8>,
    },
    Delete {
        collection: String,
        key: Vec<u8>,
    },
}

/// An atomic group of writes: after a crash either all of it is there or none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteBatch {
    pub(crate) ops: Vec<BatchOp>,
}

impl WriteBatch {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a put.
    pub fn put(&mut self, collection: &str, key: &[u8], value: &[u8]) -> &mut Self {
        self.ops.push(BatchOp::Put {
            collection: collection.to_string(),
            key: key.to_vec(),
            value: value.to_vec(),
        });
        self
    }

    /// Adds a put whose key and value the batch takes over (no copy).
    pub fn put_owned(&mut self, collection: &str, key: Vec<u8>, value: Vec<u8>) -> &mut Self {
        self.ops.push(BatchOp::Put {
            collection: collection.to_string(),
            key,
            value,
        });
        self
    }

    /// Adds a delete.
    pub fn delete(&mut self, collection: &str, key: &[u8]) -> &mut Self {
        self.ops.push(BatchOp::Delete {
            collection: collection.to_string(),
            key: key.to_vec(),
        });
        self
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    pub fn ops(&self) -> &[BatchOp] {
        &self.ops
    }

    /// The operations, handed back (e.g. to keep the data of a batch that failed).
    pub fn into_ops(self) -> Vec<BatchOp> {
        self.ops
    }

    /// Sum of key and value bytes.
    pub fn user_bytes(&self) -> u64 {
        self.ops
            .iter()
            .map(|o| match o {
                BatchOp::Put { key, value, .. } => key.len() + value.len(),
                BatchOp::Delete { key, .. } => key.len(),
            } as u64)
            .sum()
    }
}
