//! Who is calling: the [`Role`] a token grants and the authenticated [`Caller`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Shopper,
    Admin,
    Service,
}

impl Role {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "admin" => Some(Role::Admin),
            "service" => Some(Role::Service),
            _ => None,
        }
    }
}

/// The authenticated caller of a request.
#[derive(Clone, Copy, Debug)]
pub struct Caller {
    pub user_id: i64,
    pub role: Role,
}

impl Caller {
    /// The caller as a shopper the areas' services know.
    pub fn user(&self) -> crate::id::UserId {
        crate::id::UserId::new(self.user_id)
    }

    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }
}
