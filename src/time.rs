//! Time: the ledger's timestamp grammar, millisecond instants and calendar dates.
//!
//! Three shapes of time appear in the formats:
//!
//! - **Event timestamps** (`occurred_at`, `recorded_at` and the other timestamp fields):
//!   `YYYY-MM-DDTHH:MM:SS[.f+](Z|±HH:MM)`, year 0001–9999, a real proleptic-Gregorian date, hour
//!   at most 23, no leap second (`:60` is refused), an offset hour at most 23 and minute at most
//!   59, any number of fraction digits. This is the reference implementation's
//!   `requiredTimestamp` pattern plus its date check; [`parse_timestamp`] is the one place that
//!   checks it. Two timestamps compare by instant, then by their fraction digits position by
//!   position (missing digits count as `0`), so precision past the millisecond still orders
//!   ([`compare_timestamps`], the reference's `compareActionEventTimestamps`).
//! - **Writer times** ([`Timestamp`]): epoch milliseconds, written as JavaScript's
//!   `Date.prototype.toISOString` does, `YYYY-MM-DDTHH:MM:SS.mmmZ` ([`Timestamp::to_iso_millis`]).
//! - **Calendar dates** ([`CalendarDate`]): `YYYY-MM-DD`, year 0001–9999, a real
//!   proleptic-Gregorian date (the reference's `requiredCalendarDate`): partition dates, the
//!   `log --since/--until` bounds.
//!
//! The `time` crate does the calendar arithmetic (days since the epoch, month lengths, leap
//! years) with its `large-dates` range (years ±999,999), so that an instant one offset past
//! 9999-12-31 still formats. The grammar checks stay ours: RFC 3339 (which `time` parses) admits
//! strings the reference refuses, such as a lowercase `t` or a leap second, and every accepted and
//! refused input here is part of the format.
//!
//! The library never reads the clock: callers pass the current time in.

use std::cmp::Ordering;
use std::fmt;

/// The Julian day number of 1970-01-01, the Unix epoch.
const UNIX_EPOCH_JULIAN_DAY: i64 = 2_440_588;

const MS_PER_DAY: i64 = 86_400_000;

/// An instant in epoch milliseconds (UTC, no leap seconds), as JavaScript's `Date` holds one.
///
/// Ordered by instant. The writer's `recorded_at` is [`Timestamp::to_iso_millis`] of the time the
/// CLI read from the clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

impl Timestamp {
    /// The instant `ms` milliseconds after 1970-01-01T00:00:00Z (negative before it).
    pub const fn from_millis(ms: i64) -> Timestamp {
        Timestamp(ms)
    }

    /// Milliseconds since 1970-01-01T00:00:00Z.
    pub const fn millis(self) -> i64 {
        self.0
    }

    /// Milliseconds from `earlier` to `self` (negative when `earlier` is later), saturating at
    /// the bounds of `i64`.
    pub const fn millis_since(self, earlier: Timestamp) -> i64 {
        self.0.saturating_sub(earlier.0)
    }

    /// The instant `ms` milliseconds later (earlier when negative), saturating at the bounds of
    /// `i64`.
    pub const fn saturating_add_millis(self, ms: i64) -> Timestamp {
        Timestamp(self.0.saturating_add(ms))
    }

    /// The instant `ms` milliseconds earlier (later when negative), saturating at the bounds of
    /// `i64`.
    pub const fn saturating_sub_millis(self, ms: i64) -> Timestamp {
        Timestamp(self.0.saturating_sub(ms))
    }

    /// Whole seconds since the epoch (rounded towards negative infinity).
    pub const fn epoch_seconds(self) -> i64 {
        self.0.div_euclid(1000)
    }

    /// The instant of an event timestamp ([`parse_timestamp`]'s grammar), its fraction cut to
    /// milliseconds as JavaScript's `Date.parse` does; `None` when `s` is not one.
    pub fn from_iso(s: &str) -> Option<Timestamp> {
        let (seconds, fraction) = parse_timestamp(s)?;
        let ms = fraction
            .bytes()
            .chain(std::iter::repeat(b'0'))
            .take(3)
            .fold(0i64, |acc, d| acc * 10 + i64::from(d - b'0'));
        Some(Timestamp(seconds * 1000 + ms))
    }

    /// `Date.prototype.toISOString`: `YYYY-MM-DDTHH:MM:SS.mmmZ`, the year zero-padded to four
    /// digits. Instants beyond the calendar's range (years ±999,999, far outside any clock or
    /// parsed timestamp) are written as its first or last day.
    pub fn to_iso_millis(self) -> String {
        let days = self.0.div_euclid(MS_PER_DAY);
        let ms = self.0.rem_euclid(MS_PER_DAY);
        let date = date_of_epoch_days(days);
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
            date.year(),
            u8::from(date.month()),
            date.day(),
            ms / 3_600_000,
            ms / 60_000 % 60,
            ms / 1000 % 60,
            ms % 1000
        )
    }

    /// The UTC calendar date of this instant, `None` outside years 0001–9999.
    pub fn utc_date(self) -> Option<CalendarDate> {
        let date = date_of_epoch_days(self.0.div_euclid(MS_PER_DAY));
        (1..=9999)
            .contains(&date.year())
            .then_some(CalendarDate(date))
    }
}

/// The date `days` after 1970-01-01, clamped to the `time` crate's range.
fn date_of_epoch_days(days: i64) -> ::time::Date {
    let julian = (days + UNIX_EPOCH_JULIAN_DAY)
        .clamp(
            i64::from(::time::Date::MIN.to_julian_day()),
            i64::from(::time::Date::MAX.to_julian_day()),
        )
        .try_into()
        .expect("clamped to the calendar's range");
    ::time::Date::from_julian_day(julian).expect("clamped to the calendar's range")
}

/// Days since 1970-01-01 of a proleptic-Gregorian date.
fn epoch_days(date: ::time::Date) -> i64 {
    i64::from(date.to_julian_day()) - UNIX_EPOCH_JULIAN_DAY
}

/// Seconds since the epoch of 00:00:00 UTC on a proleptic-Gregorian day (any year in the
/// `time` crate's range, year 0 and negative years included); `None` when there is no such day.
pub fn day_start_epoch_seconds(year: i32, month: u8, day: u8) -> Option<i64> {
    let month = ::time::Month::try_from(month).ok()?;
    let date = ::time::Date::from_calendar_date(year, month, day).ok()?;
    Some(epoch_days(date) * 86_400)
}

/// A proleptic-Gregorian date with year 0001–9999, written `YYYY-MM-DD`.
///
/// Ordered by date, which is also the order of the written form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CalendarDate(::time::Date);

impl CalendarDate {
    /// Exactly `YYYY-MM-DD` (ASCII digits, no trimming), year at least 0001, a real date;
    /// `None` otherwise. `2023-02-29`, `0000-01-01` and `2024-1-01` are refused.
    pub fn parse(s: &str) -> Option<CalendarDate> {
        let b = s.as_bytes();
        if b.len() != 10
            || b[4] != b'-'
            || b[7] != b'-'
            || !b
                .iter()
                .enumerate()
                .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit())
        {
            return None;
        }
        let (y, m, d) = (digits(&s[0..4])?, digits(&s[5..7])?, digits(&s[8..10])?);
        if y < 1 {
            return None;
        }
        date(y, m, d).map(CalendarDate)
    }

    /// The date of a year, month (1–12) and day; `None` when it is not a real date in years
    /// 0001–9999.
    pub fn from_ymd(year: u32, month: u32, day: u32) -> Option<CalendarDate> {
        (1..=9999)
            .contains(&year)
            .then(|| date(year, month, day).map(CalendarDate))
            .flatten()
    }

    /// The year (1–9999).
    pub fn year(self) -> u32 {
        self.0.year().unsigned_abs()
    }

    /// The month (1–12).
    pub fn month(self) -> u32 {
        u32::from(u8::from(self.0.month()))
    }

    /// The day of the month (1–31).
    pub fn day(self) -> u32 {
        u32::from(self.0.day())
    }

    /// Seconds since the epoch of 00:00:00 UTC on this date.
    pub fn start_epoch_seconds(self) -> i64 {
        epoch_days(self.0) * 86_400
    }
}

impl fmt::Display for CalendarDate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04}-{:02}-{:02}",
            self.year(),
            self.month(),
            self.day()
        )
    }
}

/// The `time` date of year `y`, month `m`, day `d`, `None` when there is no such day.
fn date(y: u32, m: u32, d: u32) -> Option<::time::Date> {
    let month = ::time::Month::try_from(u8::try_from(m).ok()?).ok()?;
    ::time::Date::from_calendar_date(i32::try_from(y).ok()?, month, u8::try_from(d).ok()?).ok()
}

fn digits(s: &str) -> Option<u32> {
    (!s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

/// Checks an event timestamp (the grammar in the module docs) and splits it into the epoch
/// seconds of its instant without the fraction and its fraction digits (`""` when it has none).
/// `None` when `s` is not a timestamp. No trimming: callers trim first where the reference does.
pub fn parse_timestamp(s: &str) -> Option<(i64, &str)> {
    let b = s.as_bytes();
    if b.len() < 20 || !s.is_ascii() {
        return None;
    }
    let (y, mo, d) = (digits(&s[0..4])?, digits(&s[5..7])?, digits(&s[8..10])?);
    let (h, mi, se) = (
        digits(&s[11..13])?,
        digits(&s[14..16])?,
        digits(&s[17..19])?,
    );
    if b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    if y == 0 || h > 23 || mi > 59 || se > 59 {
        return None;
    }
    let day = date(y, mo, d)?;
    let mut rest = &s[19..];
    let mut fraction = "";
    if let Some(r) = rest.strip_prefix('.') {
        let n = r.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return None;
        }
        fraction = &r[..n];
        rest = &r[n..];
    }
    let offset_secs: i64 = if rest == "Z" {
        0
    } else {
        let rb = rest.as_bytes();
        if rb.len() != 6 || !matches!(rb[0], b'+' | b'-') || rb[3] != b':' {
            return None;
        }
        let oh = digits(&rest[1..3])?;
        let om = digits(&rest[4..6])?;
        if oh > 23 || om > 59 {
            return None;
        }
        let sign = if rb[0] == b'-' { -1 } else { 1 };
        sign * (i64::from(oh) * 3600 + i64::from(om) * 60)
    };
    let local = epoch_days(day) * 86_400 + i64::from(h) * 3600 + i64::from(mi) * 60 + i64::from(se);
    Some((local - offset_secs, fraction))
}

/// Whether `s` is an event timestamp (the grammar in the module docs).
pub fn is_timestamp(s: &str) -> bool {
    parse_timestamp(s).is_some()
}

/// Epoch seconds of a valid event timestamp (fraction dropped), `None` when it is not one.
pub fn timestamp_epoch_seconds(s: &str) -> Option<i64> {
    parse_timestamp(s).map(|(secs, _)| secs)
}

/// The reference's `compareActionEventTimestamps`: instant without fraction, then fraction
/// digits compared position by position with missing digits as `0`. Invalid timestamps sort as
/// equal to everything.
pub fn compare_timestamps(a: &str, b: &str) -> Ordering {
    let (Some((sa, fa)), Some((sb, fb))) = (parse_timestamp(a), parse_timestamp(b)) else {
        return Ordering::Equal;
    };
    sa.cmp(&sb).then_with(|| {
        let n = fa.len().max(fb.len());
        let pad = |f: &str, i: usize| f.as_bytes().get(i).copied().unwrap_or(b'0');
        (0..n)
            .map(|i| pad(fa, i).cmp(&pad(fb, i)))
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_millis_round_trips_and_formats_as_javascript() {
        for (ms, iso) in [
            (0, "1970-01-01T00:00:00.000Z"),
            (1_773_151_792_118, "2026-03-10T14:09:52.118Z"),
            (-1, "1969-12-31T23:59:59.999Z"),
            (-62_135_596_800_000, "0001-01-01T00:00:00.000Z"),
            (253_402_300_799_999, "9999-12-31T23:59:59.999Z"),
            (951_782_400_000, "2000-02-29T00:00:00.000Z"),
        ] {
            assert_eq!(Timestamp::from_millis(ms).to_iso_millis(), iso, "{ms}");
            assert_eq!(
                Timestamp::from_iso(iso),
                Some(Timestamp::from_millis(ms)),
                "{iso}"
            );
        }
        // One offset past the last day of year 9999 still formats (five-digit year).
        let late = Timestamp::from_iso("9999-12-31T23:00:00-02:00").unwrap();
        assert_eq!(late.to_iso_millis(), "10000-01-01T01:00:00.000Z");
        assert_eq!(late.utc_date(), None);
        // Fractions past the millisecond are cut, not rounded.
        assert_eq!(
            Timestamp::from_iso("2026-01-15T12:00:00.9999+01:00")
                .unwrap()
                .to_iso_millis(),
            "2026-01-15T11:00:00.999Z"
        );
    }

    #[test]
    fn millisecond_arithmetic_saturates_instead_of_overflowing() {
        let t = Timestamp::from_millis(1_000);
        assert_eq!(t.saturating_add_millis(500), Timestamp::from_millis(1_500));
        assert_eq!(t.saturating_sub_millis(1_500), Timestamp::from_millis(-500));
        assert_eq!(t.millis_since(Timestamp::from_millis(250)), 750);
        assert_eq!(Timestamp::from_millis(250).millis_since(t), -750);
        let (min, max) = (
            Timestamp::from_millis(i64::MIN),
            Timestamp::from_millis(i64::MAX),
        );
        assert_eq!(max.saturating_add_millis(1), max);
        assert_eq!(min.saturating_sub_millis(1), min);
        assert_eq!(max.millis_since(min), i64::MAX);
        assert_eq!(min.millis_since(max), i64::MIN);
    }

    #[test]
    fn calendar_dates_are_real_dates_in_years_1_to_9999() {
        for ok in ["2024-02-29", "2000-02-29", "0001-01-01", "9999-12-31"] {
            assert_eq!(CalendarDate::parse(ok).unwrap().to_string(), ok);
        }
        for bad in [
            "2023-02-29",
            "1900-02-29",
            "0000-01-01",
            "2024-1-01",
            "2024-13-01",
            "2024-04-31",
            " 2024-01-01",
            "2024-01-01T",
            "2024/01/01",
        ] {
            assert_eq!(CalendarDate::parse(bad), None, "{bad}");
        }
        let d = CalendarDate::parse("2026-03-01").unwrap();
        assert_eq!(d.start_epoch_seconds(), 1_772_323_200);
        assert_eq!(
            Timestamp::from_millis(1_772_323_200_000).utc_date(),
            Some(d)
        );
        assert_eq!(CalendarDate::from_ymd(2026, 3, 1), Some(d));
        assert_eq!(CalendarDate::from_ymd(2026, 2, 29), None);
        assert_eq!(CalendarDate::from_ymd(0, 1, 1), None);
    }
}
