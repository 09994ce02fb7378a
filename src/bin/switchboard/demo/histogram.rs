//! Reading the runtime's `/metrics` (Prometheus text format) for the demo's table:
//! counter values, and quantiles of histograms estimated from their buckets by linear
//! interpolation inside the bucket, as PromQL's `histogram_quantile` does. The
//! runtime's buckets double in width, so an estimate is good to within its bucket.

use std::time::Duration;

/// One sample line: name, labels, value.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

/// The samples of one scrape.
#[derive(Debug, Clone, Default)]
pub(super) struct Scrape(Vec<Sample>);

impl Scrape {
    /// Parses the text format; comment lines and lines it cannot read are skipped.
    pub(super) fn parse(text: &str) -> Scrape {
        Scrape(
            text.lines()
                .filter(|l| !l.starts_with('#'))
                .filter_map(sample)
                .collect(),
        )
    }

    fn matching<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        self.0.iter().filter(move |s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.iter().any(|(sk, sv)| sk == k && sv == v))
        })
    }

    /// The sum of the samples named `name` that carry every label in `labels`.
    pub(super) fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.matching(name, labels).map(|s| s.value).sum()
    }

    /// The `q` quantile of histogram `name` (without `_bucket`) over the series that
    /// carry `labels`; `None` when it has no observations.
    pub(super) fn quantile(&self, name: &str, labels: &[(&str, &str)], q: f64) -> Option<Duration> {
        let bucket = format!("{name}_bucket");
        let mut buckets: Vec<(f64, f64)> = Vec::new();
        for s in self.matching(&bucket, labels) {
            let Some(le) = s
                .labels
                .iter()
                .find(|(k, _)| k == "le")
                .and_then(|(_, v)| parse_value(v))
            else {
                continue;
            };
            match buckets.iter_mut().find(|(b, _)| *b == le) {
                Some((_, count)) => *count += s.value,
                None => buckets.push((le, s.value)),
            }
        }
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        quantile_of(&buckets, q).map(Duration::from_secs_f64)
    }
}

/// `histogram_quantile` over cumulative `(upper bound, count)` pairs sorted by bound.
fn quantile_of(buckets: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q.clamp(0.0, 1.0) * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for &(upper, count) in buckets {
        if count >= rank {
            if upper.is_infinite() {
                // Past the last finite bound: that bound is all one can say.
                return Some(lower);
            }
            let width = count - below;
            let into = if width > 0.0 {
                (rank - below) / width
            } else {
                1.0
            };
            return Some(lower + (upper - lower) * into);
        }
        (lower, below) = (upper, count);
    }
    Some(lower)
}

fn parse_value(v: &str) -> Option<f64> {
    match v {
        "+Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        v => v.parse().ok(),
    }
}

/// `name{k="v",…} value` (timestamps and exemplars after the value are ignored).
fn sample(line: &str) -> Option<Sample> {
    let line = line.trim();
    let (head, rest) = match line.find('{') {
        Some(open) => {
            let close = open + line[open..].find('}')?;
            (&line[..close + 1], &line[close + 1..])
        }
        None => line.split_at(line.find(' ')?),
    };
    let value = parse_value(rest.split_whitespace().next()?)?;
    let (name, labels) = match head.find('{') {
        None => (head.to_owned(), Vec::new()),
        Some(open) => (
            head[..open].to_owned(),
            labels(&head[open + 1..head.len() - 1]),
        ),
    };
    Some(Sample {
        name,
        labels,
        value,
    })
}

/// `k="v",k2="v2"`; label values here never hold quotes or commas (binding ids,
/// source ids, kinds and bounds are all plain).
fn labels(text: &str) -> Vec<(String, String)> {
    text.split(',')
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            Some((k.trim().to_owned(), v.trim().trim_matches('"').to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP x_seconds Something.
# TYPE x_seconds histogram
x_seconds_sum{binding="a"} 0.5
x_seconds_count{binding="a"} 10
x_seconds_bucket{le="0.001",binding="a"} 0
x_seconds_bucket{le="0.002",binding="a"} 5
x_seconds_bucket{le="0.004",binding="a"} 10
x_seconds_bucket{le="+Inf",binding="a"} 10
x_seconds_bucket{le="0.001",binding="b"} 0
x_seconds_bucket{le="+Inf",binding="b"} 0
y_total{binding="a",kind="handler"} 3
y_total{binding="a",kind="timeout"} 1
y_total{binding="b",kind="handler"} 7
"#;

    #[test]
    fn a_quantile_is_interpolated_inside_its_bucket() {
        let s = Scrape::parse(TEXT);
        let p50 = s.quantile("x_seconds", &[("binding", "a")], 0.5).unwrap();
        assert!((p50.as_secs_f64() - 0.002).abs() < 1e-9, "{p50:?}");
        let p75 = s.quantile("x_seconds", &[("binding", "a")], 0.75).unwrap();
        assert!((p75.as_secs_f64() - 0.003).abs() < 1e-9, "{p75:?}");
    }

    #[test]
    fn a_histogram_without_observations_has_no_quantile() {
        let s = Scrape::parse(TEXT);
        assert_eq!(s.quantile("x_seconds", &[("binding", "b")], 0.5), None);
        assert_eq!(s.quantile("nothing", &[], 0.5), None);
    }

    #[test]
    fn a_sum_adds_the_series_that_carry_the_labels() {
        let s = Scrape::parse(TEXT);
        assert_eq!(s.sum("y_total", &[("binding", "a")]), 4.0);
        assert_eq!(s.sum("y_total", &[("kind", "handler")]), 10.0);
        assert_eq!(s.sum("y_total", &[]), 11.0);
    }

    #[test]
    fn observations_past_the_last_bound_report_that_bound() {
        assert_eq!(
            quantile_of(&[(1.0, 0.0), (f64::INFINITY, 4.0)], 0.5),
            Some(1.0)
        );
    }
}
