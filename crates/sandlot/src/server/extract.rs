//! Request extractors: the authenticated caller, JSON bodies and query strings whose rejections become
//! API errors with a clear message.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Query, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::Json;
use sandlot_api::codes;
use sandlot_control::Caller;
use serde::de::DeserializeOwned;

use super::app::AppState;
use super::error::ApiError;

/// The caller a valid `Authorization: Bearer` key stands for.
pub struct Auth(pub Caller);

impl FromRequestParts<AppState> for Auth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, ApiError> {
        Ok(Auth(app.control.authenticate(required_bearer_key(&parts.headers)?)?))
    }
}

/// The caller of a request whose answer is a stream that may outlive the key (a watch, a log, an
/// exec's output, a pull's progress), and the lease [`super::stream::leased`] keeps checking while it lasts.
pub struct Leased(pub Caller, pub sandlot_control::KeyLease);

impl FromRequestParts<AppState> for Leased {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, ApiError> {
        let (caller, lease) = app.control.authenticate_lease(required_bearer_key(&parts.headers)?)?;
        Ok(Leased(caller, lease))
    }
}

/// The API key of the `Authorization: Bearer` header every authenticated route needs, or the `401`
/// saying what is wrong with it.
fn required_bearer_key(headers: &axum::http::HeaderMap) -> Result<&str, ApiError> {
    match bearer_key(headers) {
        None => Err(unauthenticated("missing Authorization header; send `Authorization: Bearer <API key>`")),
        Some(None) => Err(unauthenticated("malformed Authorization header; expected `Bearer <API key>`")),
        Some(Some(key)) => Ok(key),
    }
}

fn unauthenticated(message: &str) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, codes::UNAUTHENTICATED, message)
}

/// The key of an `Authorization: Bearer <key>` header (scheme case-insensitive): `None` without the
/// header, `Some(None)` when it is not a bearer key.
pub fn bearer_key(headers: &axum::http::HeaderMap) -> Option<Option<&str>> {
    let header = headers.get(axum::http::header::AUTHORIZATION)?;
    Some(
        header
            .to_str()
            .ok()
            .and_then(|h| h.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, key)| key.trim())
            .filter(|k| !k.is_empty()),
    )
}

/// A JSON body; unknown fields and type errors are a 400 that names the problem. The body must be an
/// object, as every documented request body is.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match Json::<Object<T>>::from_request(req, state).await {
            Ok(Json(Object(v))) => Ok(ApiJson(v)),
            Err(JsonRejection::MissingJsonContentType(_)) => {
                Err(ApiError::invalid("expected a JSON body with `Content-Type: application/json`"))
            }
            Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                codes::TOO_LARGE,
                "JSON body over 16 MiB; send large data as a file upload instead",
            )),
            Err(e) => Err(ApiError::invalid(format!("invalid JSON body: {}", e.body_text()))),
        }
    }
}

/// A query string; bad values are a 400 that names the parameter.
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(v)) => Ok(ApiQuery(v)),
            Err(e @ QueryRejection::FailedToDeserializeQueryString(_)) => {
                Err(ApiError::invalid(format!("invalid query string: {}", e.body_text())))
            }
            Err(e) => Err(ApiError::invalid(e.body_text())),
        }
    }
}

/// Path parameters; a malformed one (e.g. a non-numeric process id) is a 400 in the JSON error shape.
pub struct ApiPath<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(ApiPath(v)),
            Err(e) => Err(ApiError::invalid(format!("invalid path: {}", e.body_text()))),
        }
    }
}

/// An optional JSON body: empty (or only whitespace) is the type's default.
pub fn optional_json<T: DeserializeOwned + Default>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice::<Object<T>>(body)
        .map(|Object(v)| v)
        .map_err(|e| ApiError::invalid(format!("invalid JSON body: {e}")))
}

/// `T` read from a JSON object only. serde's derived structs also take a JSON array, filling the
/// fields in order (`[null, null]` was a valid `CreateSandbox`), which no request body documents.
struct Object<T>(T);

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for Object<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjectVisitor<T>(std::marker::PhantomData<T>);
        impl<'de, T: serde::Deserialize<'de>> serde::de::Visitor<'de> for ObjectVisitor<T> {
            type Value = Object<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Object<T>, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(Object)
            }
        }
        deserializer.deserialize_map(ObjectVisitor(std::marker::PhantomData))
    }
}
