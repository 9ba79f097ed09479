//! Headers every answer carries, added to every response of the OpenAPI document
//! here rather than in each handler's annotation (an operation added later gets
//! them too): `X-Request-Id` ([`super::request_id`]).
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::RefOr;
use utoipa::Modify;

pub struct RequestIdHeader;

impl Modify for RequestIdHeader {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let header = HeaderBuilder::new()
            .schema(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .min_length(Some(1))
                    .max_length(Some(super::request_id::MAX_LEN))
                    .pattern(Some("^[A-Za-z0-9._:+/=@-]+$")),
            )
            .description(Some(
                "the request's id: the caller's X-Request-Id when it sent a usable one \
                 (1 to 128 of A-Z a-z 0-9 . _ : + / = @ -), otherwise one made by the server",
            ))
            .build();
        for item in doc.paths.paths.values_mut() {
            let ops = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ];
            for op in ops.into_iter().flatten() {
                for response in op.responses.responses.values_mut() {
                    if let RefOr::T(response) = response {
                        response.headers.insert("X-Request-Id".to_owned(), header.clone());
                    }
                }
            }
        }
    }
}
