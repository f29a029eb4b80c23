use std::time::{SystemTime, UNIX_EPOCH};

/// `time` as `YYYY-MM-DDTHH:MM:SSZ` (UTC, whole seconds).
pub fn utc_timestamp(time: SystemTime) -> String {
    let secs = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// Whether `text` has the shape [`utc_timestamp`] writes
/// (`YYYY-MM-DDTHH:MM:SSZ`).
pub fn is_utc_timestamp(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 20
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

/// The instant a [`utc_timestamp`] names; none when `text` is not one, or
/// names no real date (a 30th of February, an hour 24) or one before
/// 1970.
pub fn parse_utc_timestamp(text: &str) -> Option<SystemTime> {
    if !is_utc_timestamp(text) {
        return None;
    }
    let field = |range: std::ops::Range<usize>| text[range].parse::<i64>().ok();
    let (year, month, day) = (field(0..4)?, field(5..7)?, field(8..10)?);
    let (hour, minute, second) = (field(11..13)?, field(14..16)?, field(17..19)?);
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        1..=12 => 31,
        _ => return None,
    };
    if !(1..=month_days).contains(&day) || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    // Days since 1970-01-01 from a civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second;
    u64::try_from(secs)
        .ok()
        .map(|s| UNIX_EPOCH + std::time::Duration::from_secs(s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn known_instants() {
        let at = |s| utc_timestamp(UNIX_EPOCH + Duration::from_secs(s));
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(at(1_795_316_645), "2026-11-22T03:04:05Z");
    }

    #[test]
    fn a_timestamp_read_back_is_the_instant_written() {
        for secs in [
            0,
            59,
            951_782_400,
            951_868_799,
            1_795_316_645,
            4_102_444_800,
        ] {
            let at = UNIX_EPOCH + Duration::from_secs(secs);
            assert_eq!(parse_utc_timestamp(&utc_timestamp(at)), Some(at), "{secs}");
        }
        for bad in [
            "2026-02-29T00:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-00-10T00:00:00Z",
            "2026-04-31T00:00:00Z",
            "2026-11-22T24:00:00Z",
            "2026-11-22T03:60:00Z",
            "1969-12-31T23:59:59Z",
            "2026-11-22T03:04:05",
        ] {
            assert_eq!(parse_utc_timestamp(bad), None, "{bad:?}");
        }
        assert!(parse_utc_timestamp("2000-02-29T12:00:00Z").is_some());
    }

    #[test]
    fn the_shape_it_writes_is_the_shape_it_accepts() {
        assert!(is_utc_timestamp(&utc_timestamp(SystemTime::now())));
        for bad in [
            "",
            "2026-11-22T03:04:05",
            "2026-11-22 03:04:05Z",
            "2026-11-22T03:04:05+00:00",
            "2026-1x-22T03:04:05Z",
            "2026-11-22T03:04:05.5Z",
        ] {
            assert!(!is_utc_timestamp(bad), "{bad:?}");
        }
    }
}
