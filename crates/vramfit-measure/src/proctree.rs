//! The process tree of a command: the root and every descendant, from `/proc` on Linux.
//!
//! GPU memory is reported per process id, and a training script often runs its work in
//! children (DataLoader workers, `torchrun` ranks, `accelerate launch`): the command's memory
//! is the sum over its whole tree. Elsewhere than Linux the tree is the root alone.

use std::collections::{BTreeSet, HashMap};

/// The root and all its descendants now, sorted.
pub fn descendants(root: u32) -> BTreeSet<u32> {
    let parents = parent_map();
    tree_of(root, &parents)
}

/// The tree of `root` in a pid → parent map.
pub fn tree_of(root: u32, parents: &HashMap<u32, u32>) -> BTreeSet<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for (&pid, &ppid) in parents {
        children.entry(ppid).or_default().push(pid);
    }
    let mut tree = BTreeSet::new();
    let mut todo = vec![root];
    while let Some(pid) = todo.pop() {
        if tree.insert(pid)
            && let Some(kids) = children.get(&pid)
        {
            todo.extend(kids);
        }
    }
    tree
}

/// Every process's parent, read from `/proc/PID/stat` (empty where there is no `/proc`).
fn parent_map() -> HashMap<u32, u32> {
    let mut parents = HashMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return parents };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        // A process can exit between read_dir and this read: skip it.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        if let Some(ppid) = parse_ppid(&stat) {
            parents.insert(pid, ppid);
        }
    }
    parents
}

/// The parent pid in a `/proc/PID/stat` line: the field after the state, after the last `)`
/// (the command name in parentheses may itself hold spaces and parentheses).
pub fn parse_ppid(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let _state = fields.next()?;
    fields.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ppid_survives_odd_command_names() {
        assert_eq!(parse_ppid("4242 (python) S 17 4242 4242 0 -1"), Some(17));
        assert_eq!(parse_ppid("9 (a) b (c)) R 3 9 9"), Some(3));
        assert_eq!(parse_ppid("9 (trunc"), None);
    }

    #[test]
    fn tree_follows_grandchildren_only() {
        let parents = HashMap::from([(2, 1), (3, 2), (4, 2), (5, 1), (6, 3)]);
        assert_eq!(tree_of(2, &parents), BTreeSet::from([2, 3, 4, 6]));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn real_children_and_grandchildren_are_in_the_tree() {
        use std::process::{Command, Stdio};
        // sh starts two sleeps and a subshell with its own sleep, then waits for them.
        let mut child = Command::new("sh")
            .args(["-c", "sleep 3 & sleep 3 & (sleep 3 & wait) & wait"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let root = child.id();
        let mut tree = BTreeSet::new();
        for _ in 0..100 {
            tree = descendants(root);
            if tree.len() >= 5 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        assert!(tree.contains(&root));
        // sh, two sleeps, the subshell and its sleep.
        assert_eq!(tree.len(), 5, "{tree:?}");
        assert!(!tree.contains(&std::process::id()));
    }
}
