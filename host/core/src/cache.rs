use std::collections::HashMap;
use std::hash::Hash;

/// A bounded map that forgets what has not been used lately: entries live
/// in a current and a previous generation; when the current one is full it
/// becomes the previous one (dropping the old previous), and a hit in the
/// previous generation moves the entry back to the current one.
pub(crate) struct Generational<K, V> {
    current: HashMap<K, V>,
    previous: HashMap<K, V>,
    capacity: usize,
}

impl<K: Eq + Hash, V: Clone> Generational<K, V> {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            current: HashMap::new(),
            previous: HashMap::new(),
            capacity,
        }
    }

    pub(crate) fn get(&mut self, key: &K) -> Option<V>
    where
        K: Clone,
    {
        if let Some(v) = self.current.get(key) {
            return Some(v.clone());
        }
        let v = self.previous.remove(key)?;
        self.insert(key.clone(), v.clone());
        Some(v)
    }

    pub(crate) fn insert(&mut self, key: K, value: V) {
        if self.current.len() >= self.capacity {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(key, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_entries_survive_turnover() {
        let mut cache = Generational::new(2);
        cache.insert(1, "a");
        cache.insert(2, "b");
        cache.insert(3, "c");
        assert_eq!(cache.get(&1), Some("a"));
        cache.insert(4, "d");
        cache.insert(5, "e");
        assert_eq!(cache.get(&1), Some("a"));
        assert_eq!(cache.get(&2), None);
    }
}
