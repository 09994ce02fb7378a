//! Line charts as SVG, drawn on the server from a sampled series: no chart library,
//! no script, and the same escaping as the rest of the page (labels are text nodes).
//! The SVG stretches to its box (`preserveAspectRatio="none"`), so the labels sit in
//! the caption below it rather than inside, where they would stretch too.

use maud::{html, Markup};

/// One line: its legend label and its values, oldest first, one per sample.
pub(crate) struct Series<'a> {
    pub(crate) label: &'a str,
    pub(crate) values: Vec<f64>,
}

const W: f64 = 600.0;
const H: f64 = 150.0;

/// A chart of `series` over `slots` samples (the ring's capacity, so a young series
/// fills from the right as the ring does), scaled to the largest value.
pub(crate) fn line(title: &str, series: &[Series<'_>], slots: usize) -> Markup {
    let slots = slots.max(2);
    let max = series
        .iter()
        .flat_map(|s| s.values.iter().copied())
        .filter(|v| v.is_finite())
        .fold(0.0_f64, f64::max);
    let top = nice_ceiling(max);
    let points = |values: &[f64]| -> String {
        let offset = slots.saturating_sub(values.len());
        values
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let x = (offset + i) as f64 * W / (slots - 1) as f64;
                let y = H - (v.max(0.0) / top).min(1.0) * (H - 12.0);
                format!("{x:.1},{y:.1}")
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    html! {
        figure.chart {
            svg.chart viewBox=(format!("0 0 {W} {H}")) preserveAspectRatio="none" role="img" aria-label=(title) {
                line x1="0" y1=(H - 0.5) x2=(W) y2=(H - 0.5) stroke="#d8dde3" {}
                @for (i, s) in series.iter().enumerate() {
                    polyline class=(format!("line{}", i % 3)) points=(points(&s.values)) {}
                }
            }
            figcaption.legend {
                strong { (title) } " "
                span.muted { "(top " (format_value(top)) ") " }
                @for (i, s) in series.iter().enumerate() {
                    span class=(format!("k{}", i % 3)) {
                        "— " (s.label) " " (format_value(s.values.last().copied().unwrap_or(0.0)))
                    }
                }
            }
        }
    }
}

/// One bar of a [`timeline`]: an interval (unix ms) and whether it went well. The
/// timeline is the runtime console's; the gateway's has none.
#[cfg_attr(not(feature = "runtime"), allow(dead_code))]
pub(crate) struct Bar {
    pub(crate) start_ms: i64,
    pub(crate) end_ms: i64,
    pub(crate) ok: bool,
    /// Shown on hover (an SVG `title`), e.g. `#2 timeout 10012 ms`.
    pub(crate) label: String,
}

/// One lane of a [`timeline`]: a row's attempts.
#[cfg_attr(not(feature = "runtime"), allow(dead_code))]
pub(crate) struct Lane {
    pub(crate) label: String,
    pub(crate) bars: Vec<Bar>,
}

/// Lane height in the timeline's SVG units.
#[cfg_attr(not(feature = "runtime"), allow(dead_code))]
const LANE: f64 = 22.0;
/// The narrowest bar drawn, in SVG units: an attempt of a millisecond still shows.
#[cfg_attr(not(feature = "runtime"), allow(dead_code))]
const MIN_BAR: f64 = 3.0;

/// `ms` as a person reads a duration: milliseconds below 2 s, seconds below 2 min,
/// minutes above.
#[cfg_attr(not(feature = "runtime"), allow(dead_code))]
fn duration_label(ms: f64) -> String {
    if ms < 2_000.0 {
        format!("{ms:.0} ms")
    } else if ms < 120_000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else {
        format!("{:.1} min", ms / 60_000.0)
    }
}

/// A timeline of `lanes`' bars from `origin_ms` (an event's receipt) to the last
/// bar's end, one lane per row, failures in the bad colour: where the time of an
/// event's deliveries went, at a glance. Bars narrower than [`MIN_BAR`] are drawn
/// that wide, so a 2 ms attempt among hour-long backoffs still shows.
#[cfg_attr(not(feature = "runtime"), allow(dead_code))]
pub(crate) fn timeline(title: &str, origin_ms: i64, lanes: &[Lane]) -> Markup {
    let end = lanes
        .iter()
        .flat_map(|l| l.bars.iter().map(|b| b.end_ms))
        .fold(origin_ms, i64::max);
    // A twentieth of room after the last bar, and at least 10 ms in all, so the last
    // bar is not drawn against the edge and a few milliseconds do not fill the width.
    let span = ((end - origin_ms) as f64 * 1.05).max(10.0);
    let x = |ms: i64| ((ms - origin_ms).max(0) as f64 / span * W).min(W - MIN_BAR);
    let h = LANE * lanes.len().max(1) as f64;
    html! {
        figure.chart {
            svg.timeline viewBox=(format!("0 0 {W} {h}")) preserveAspectRatio="none" role="img" aria-label=(title) {
                @for (i, lane) in lanes.iter().enumerate() {
                    @let y = i as f64 * LANE;
                    line x1="0" y1=(y + LANE - 0.5) x2=(W) y2=(y + LANE - 0.5) stroke="#eef0f3" {}
                    @for b in &lane.bars {
                        rect class=(if b.ok { "bar ok" } else { "bar bad" })
                            x=(format!("{:.1}", x(b.start_ms)))
                            y=(format!("{:.1}", y + 4.0))
                            width=(format!("{:.1}", (x(b.end_ms) - x(b.start_ms)).max(MIN_BAR)))
                            height=(format!("{:.1}", LANE - 8.0)) {
                            title { (lane.label) " " (b.label) }
                        }
                    }
                }
            }
            figcaption.legend {
                strong { (title) } " "
                span.muted { "(from receipt to " (duration_label(span)) " after) " }
                @for (i, lane) in lanes.iter().enumerate() {
                    span class=(format!("k{}", i % 3)) { (i + 1) ": " (lane.label) }
                }
            }
        }
    }
}

/// The smallest of 1, 2 or 5 times a power of ten at or above `v` (at least 1), so
/// the axis reads round numbers.
pub(crate) fn nice_ceiling(v: f64) -> f64 {
    if v.is_nan() || v <= 1.0 {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|c| *c >= v)
        .unwrap_or(10.0 * p)
}

fn format_value(v: f64) -> String {
    if v >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_axis_rounds_up_to_one_two_or_five() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(f64::NAN), 1.0);
        assert_eq!(nice_ceiling(1.5), 2.0);
        assert_eq!(nice_ceiling(3.0), 5.0);
        assert_eq!(nice_ceiling(7.0), 10.0);
        assert_eq!(nice_ceiling(120.0), 200.0);
        assert_eq!(nice_ceiling(5000.0), 5000.0);
    }

    #[test]
    fn a_young_series_fills_from_the_right_and_labels_are_text() {
        let s = [Series {
            label: "<b>x</b>",
            values: vec![0.0, 10.0],
        }];
        let svg = line("t", &s, 3).into_string();
        // Two of three slots: x = 300 and 600; 10 is the top (y = 12).
        assert!(svg.contains("points=\"300.0,150.0 600.0,12.0\""), "{svg}");
        assert!(
            svg.contains("&lt;b&gt;x&lt;/b&gt;"),
            "labels are escaped: {svg}"
        );
    }

    #[test]
    fn a_timeline_places_bars_from_the_receipt_and_never_hides_a_short_one() {
        let lanes = [Lane {
            label: "<i>b</i> (outbox)".into(),
            bars: vec![
                Bar {
                    start_ms: 1_000,
                    end_ms: 1_001,
                    ok: false,
                    label: "#1".into(),
                },
                Bar {
                    start_ms: 1_950,
                    end_ms: 2_000,
                    ok: true,
                    label: "#2".into(),
                },
            ],
        }];
        let svg = timeline("attempts", 0, &lanes).into_string();
        // 2,000 ms end, 5 % room: 2,100 ms across 600 units.
        assert!(svg.contains("x=\"285.7\""), "{svg}");
        assert!(
            svg.contains("width=\"3.0\""),
            "a 1 ms bar is drawn {MIN_BAR} wide: {svg}"
        );
        assert!(svg.contains("class=\"bar ok\"") && svg.contains("class=\"bar bad\""));
        assert!(svg.contains("to 2.1 s after"), "{svg}");
        assert!(
            svg.contains("&lt;i&gt;b&lt;/i&gt;"),
            "labels are escaped: {svg}"
        );
        assert_eq!(duration_label(90_000.0), "90.0 s");
        assert_eq!(duration_label(600_000.0), "10.0 min");
    }
}
