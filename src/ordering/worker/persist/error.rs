//! Why persisting a batch failed, and whether trying again may help.

#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    #[error("postgres: {0}")]
    Db(#[from] sqlx::Error),
    #[error("order numbers: {0:#}")]
    Numbers(anyhow::Error),
    /// Rows the insert skipped whose conflicts did not settle in the rounds the
    /// worker gives them (each retry met another conflict): the batch is not
    /// committed, nor its messages acknowledged as stored.
    #[error("{0} order(s) whose conflicts did not settle")]
    Unsettled(usize),
}

impl PersistError {
    /// Whether trying again later may succeed (the database is down or busy), as
    /// opposed to a batch the database refuses as such.
    pub fn is_transient(&self) -> bool {
        match self {
            PersistError::Numbers(_) => true,
            PersistError::Unsettled(_) => false,
            PersistError::Db(sqlx::Error::Database(db)) => {
                // Data exceptions, integrity violations and SQL errors will fail again.
                let class = db
                    .code()
                    .map(|c| c.chars().take(2).collect::<String>())
                    .unwrap_or_default();
                !matches!(class.as_str(), "22" | "23" | "42")
            }
            PersistError::Db(
                sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) | sqlx::Error::TypeNotFound { .. },
            ) => false,
            PersistError::Db(_) => true,
        }
    }
}
