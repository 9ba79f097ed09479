//! What the generated OpenAPI document needs besides the handlers' annotations:
//! links between operations, and ids in URLs documented as the digits the server
//! reads. Both are drawn from the paths, so operations added later get them too.
use utoipa::Modify;

/// OpenAPI links: where the ids an answer carries can be used next (a created
/// voucher's in every `/vouchers/{id}` operation, admin or public, a placed order's
/// in every `/orders/{order_id}` one, a rule's name in its `next`). Drawn from the
/// paths themselves, so that an operation added under those paths gets its links
/// without an edit here. Clients and tools (schemathesis's stateful phase) follow
/// them.
pub struct Links;

/// An id an answer carries, and the operations that take it.
pub(super) struct LinkRule {
    /// The operation whose answer carries the id (POST or PUT), and the status.
    pub(super) method: &'static str,
    pub(super) path: &'static str,
    pub(super) status: &'static str,
    /// The field of the answer.
    pub(super) field: &'static str,
    /// The operations at these paths (and below a path that ends in a parameter).
    pub(super) to: &'static [&'static str],
    /// Their parameter that takes it.
    pub(super) param: &'static str,
}

pub(super) const LINKS: [LinkRule; 4] = [
    LinkRule {
        method: "post",
        path: "/api/v1/admin/vouchers",
        status: "201",
        field: "id",
        to: &["/api/v1/admin/vouchers/{id}", "/api/v1/vouchers/{id}"],
        param: "id",
    },
    LinkRule {
        method: "post",
        path: "/api/v1/admin/vouchers",
        status: "201",
        field: "shop_id",
        to: &["/api/v1/vouchers"],
        param: "shop_id",
    },
    LinkRule {
        method: "post",
        path: "/api/v1/vouchers/{id}/orders",
        status: "202",
        field: "order_id",
        to: &["/api/v1/orders/{order_id}"],
        param: "order_id",
    },
    LinkRule {
        method: "put",
        path: "/api/v1/admin/sequences/{name}",
        status: "200",
        field: "name",
        to: &["/api/v1/sequences/{name}"],
        param: "name",
    },
];

impl Modify for Links {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::extensions::Extensions;
        use utoipa::openapi::link::LinkBuilder;
        for rule in &LINKS {
            // Every operation at a prefix, and below one that ends in a parameter
            // (`/api/v1/vouchers/{id}/orders` is the voucher's; `/api/v1/vouchers`
            // names only the list).
            let targets: Vec<String> = doc
                .paths
                .paths
                .iter()
                .filter(|(path, _)| {
                    rule.to
                        .iter()
                        .any(|p| path.as_str() == *p || (p.ends_with('}') && path.starts_with(&format!("{p}/"))))
                })
                .flat_map(|(_, item)| {
                    [&item.get, &item.put, &item.post, &item.delete, &item.patch]
                        .into_iter()
                        .flatten()
                        .filter_map(|op| op.operation_id.clone())
                })
                .collect();
            // A rule that finds no operation is caught by the test below.
            let Some(item) = doc.paths.paths.get_mut(rule.path) else {
                continue;
            };
            let op = match rule.method {
                "put" => &mut item.put,
                _ => &mut item.post,
            };
            let Some(op) = op else {
                continue;
            };
            let Some(utoipa::openapi::RefOr::T(response)) = op.responses.responses.get_mut(rule.status) else {
                continue;
            };
            for operation_id in targets {
                // utoipa 5.5 writes `Link::operation_id` as "operation_id", not
                // OpenAPI's "operationId"; the extensions map is written as given.
                let key = Extensions::from_iter([("operationId", operation_id.clone())]);
                let link = LinkBuilder::new()
                    .extensions(Some(key))
                    .parameter(rule.param, format!("$response.body#/{}", rule.field))
                    .build();
                response.links.insert(operation_id, link.into());
            }
        }
    }
}

/// Ids in paths and query strings are read as decimal digits ([`crate::id::parse_str`]):
/// every `i64` parameter (the handlers name ids so, `("id" = i64, Path, ...)`) is
/// documented as such a string, so that no tool sends `42.0` or `4.2e1`.
pub struct IdParams;

impl Modify for IdParams {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::schema::{KnownFormat, SchemaFormat};
        for item in doc.paths.paths.values_mut() {
            let ops = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ];
            for op in ops.into_iter().flatten() {
                for param in op.parameters.iter_mut().flatten() {
                    let is_i64 = matches!(&param.schema, Some(utoipa::openapi::RefOr::T(utoipa::openapi::Schema::Object(o)))
                        if o.format == Some(SchemaFormat::KnownFormat(KnownFormat::Int64)));
                    if is_i64 {
                        param.schema = Some(crate::id::url_schema().into());
                    }
                }
            }
        }
    }
}
