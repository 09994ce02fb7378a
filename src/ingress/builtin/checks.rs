//! Checks the built-in connectors share on their sources' runtime-level settings.

use crate::duration::MAX_SECS;
use crate::error::Result;
use crate::inbound::SourceContext;

/// Refuses a source without a secret, for providers that verify with one.
pub(crate) fn require_secret(ctx: &SourceContext) -> Result<()> {
    if ctx.secrets().is_empty() {
        Err(ctx.invalid(
            "secret_env is required (or secret_file): name where the signing secret is kept",
        ))
    } else {
        Ok(())
    }
}

/// Refuses secrets for a source that takes none.
pub(crate) fn no_secrets(ctx: &SourceContext) -> Result<()> {
    if ctx.secrets().is_empty() {
        Ok(())
    } else {
        Err(ctx.invalid("this provider takes no secret_env"))
    }
}

/// A signed-timestamp tolerance plus grace: positive and at most [`MAX_SECS`].
pub(crate) fn tolerance(
    ctx: &SourceContext,
    given: Option<i64>,
    grace: Option<i64>,
    default: i64,
) -> Result<i64> {
    let t = given
        .unwrap_or(default)
        .checked_add(grace.unwrap_or(0))
        .filter(|t| *t <= MAX_SECS)
        .ok_or_else(|| {
            ctx.invalid(&format!(
                "timestamp_tolerance_secs + timestamp_grace_secs must be at most {MAX_SECS} (10 years)"
            ))
        })?;
    if t <= 0 {
        return Err(ctx.invalid("timestamp_tolerance_secs must be positive"));
    }
    Ok(t)
}
