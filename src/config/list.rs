//! Settings that list several servers.

/// The items of a comma-separated list (`SECKILL_DATABASE_STANDBY_URLS`,
/// `AMQP_URL`), blanks around each ignored.
pub fn comma_list(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(str::to_owned)
        .collect()
}
