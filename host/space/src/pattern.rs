//! Shell patterns, as permissions and sync policies write them.

/// `text` matched whole against a shell pattern: `*` any run of
/// characters, `?` one, `[abc]`, `[a-z]` and `[!abc]` one of (or none of)
/// a set; anything else itself.
pub fn shell_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    // The last `*` seen and where in the text it was tried from.
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        let step = match p.get(pi) {
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
                continue;
            }
            Some('?') => Some(pi + 1),
            Some('[') => class(&p, pi, t[ti]),
            Some(c) if *c == t[ti] => Some(pi + 1),
            _ => None,
        };
        match step {
            Some(next) => {
                pi = next;
                ti += 1;
            }
            None => match star {
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// Where the set at `p[start]` (`[`) ends if `c` is in it, else `None`.
/// A `[` with no `]` is itself.
fn class(p: &[char], start: usize, c: char) -> Option<usize> {
    let mut i = start + 1;
    let negated = matches!(p.get(i), Some('!' | '^'));
    if negated {
        i += 1;
    }
    let first = i;
    let mut found = false;
    while i < p.len() && (p[i] != ']' || i == first) {
        if i + 2 < p.len() && p[i + 1] == '-' && p[i + 2] != ']' {
            found |= p[i] <= c && c <= p[i + 2];
            i += 3;
        } else {
            found |= p[i] == c;
            i += 1;
        }
    }
    if i >= p.len() {
        // No closing bracket: a literal `[`.
        return (c == '[').then_some(start + 1);
    }
    (found != negated).then_some(i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_patterns() {
        assert!(shell_match(
            "rye.execute.tool.*",
            "rye.execute.tool.rye.bash.bash"
        ));
        assert!(shell_match("*", "anything"));
        assert!(shell_match("rye.*.tool.demo.?", "rye.load.tool.demo.x"));
        assert!(!shell_match("rye.*.tool.demo.?", "rye.load.tool.demo.xy"));
        assert!(shell_match(
            "rye.execute.tool.demo.[ab]*",
            "rye.execute.tool.demo.beta"
        ));
        assert!(!shell_match(
            "rye.execute.tool.demo.[!ab]*",
            "rye.execute.tool.demo.beta"
        ));
        assert!(shell_match(
            "rye.execute.tool.v[0-9]",
            "rye.execute.tool.v7"
        ));
        assert!(shell_match("a[b", "a[b"));
        assert!(!shell_match("rye.execute.tool.*", "rye.sign.tool.x"));
        assert!(!shell_match("", "x"));
        assert!(shell_match("", ""));
        assert!(shell_match("*a*b*", "xxaxxbxx"));
        assert!(!shell_match("*a*b", "xxaxxbxx"));
    }
}
