//! The control plane's template routes: templates are sandlot images (`GET /templates` lists the
//! images the tenant can boot, deleting one deletes the image, or the snapshot of that id); building
//! through E2B's build API is refused with a pointer to `sandlot image build`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use sandlot_api::e2b::{rfc3339_ms, E2bTemplate, TemplateAlias};
use sandlot_api::{ImageInfo, ImageOwner};
use sandlot_control::Kind;

use super::auth::E2bAuth;
use super::error::E2bApiError;
use super::ENVD_VERSION;
use crate::server::app::AppState;
use crate::server::extract::ApiPath;

/// The template names an image answers to: its own, and the `--e2b-template` names mapped to it
/// (`base` for the default image).
fn names_of(app: &AppState, image: &ImageInfo) -> Vec<String> {
    let mut names = vec![image.name.clone()];
    if image.name == app.control.config().default_image {
        names.push("base".into());
    }
    names.extend(app.e2b.templates.iter().filter(|(_, i)| **i == image.name).map(|(n, _)| n.clone()));
    names
}

fn template(app: &AppState, image: &ImageInfo) -> E2bTemplate {
    let d = &app.control.config().defaults;
    let names = names_of(app, image);
    E2bTemplate {
        template_id: image.name.clone(),
        build_id: image.digest.clone().unwrap_or_else(|| image.name.clone()),
        cpu_count: d.cpu.ceil().max(1.0) as u64,
        memory_mb: d.memory_mb,
        disk_size_mb: d.disk_mb,
        public: image.owner != ImageOwner::Tenant,
        aliases: names.clone(),
        names,
        created_at: rfc3339_ms(image.created_at_ms),
        updated_at: rfc3339_ms(image.created_at_ms),
        created_by: None,
        last_spawned_at: None,
        spawn_count: 0,
        build_count: 1,
        envd_version: ENVD_VERSION.into(),
        build_status: "ready".into(),
    }
}

/// The image a template name stands for (an `--e2b-template` name or `base` resolved).
fn image_name<'a>(app: &'a AppState, name: &'a str) -> &'a str {
    if name == "base" {
        return &app.control.config().default_image;
    }
    app.e2b.templates.get(name).map_or(name, String::as_str)
}

pub async fn list(State(app): State<AppState>, E2bAuth(caller): E2bAuth) -> Result<impl IntoResponse, E2bApiError> {
    let images = app.control.list_images(&caller)?.images;
    Ok(Json(images.iter().map(|i| template(&app, i)).collect::<Vec<_>>()))
}

pub async fn get(
    State(app): State<AppState>,
    E2bAuth(caller): E2bAuth,
    ApiPath(id): ApiPath<String>,
) -> Result<impl IntoResponse, E2bApiError> {
    let image = app.control.get_image(&caller, image_name(&app, &id))?;
    Ok(Json(template(&app, &image)))
}

pub async fn alias(
    State(app): State<AppState>,
    E2bAuth(caller): E2bAuth,
    ApiPath(alias): ApiPath<String>,
) -> Result<impl IntoResponse, E2bApiError> {
    let image = app.control.get_image(&caller, image_name(&app, &alias))?;
    Ok(Json(TemplateAlias { template_id: image.name.clone(), public: image.owner != ImageOwner::Tenant }))
}

/// Deletes the tenant's snapshot of that id or name (E2B deletes snapshots through this route), else
/// the tenant's image of that name.
pub async fn delete(
    State(app): State<AppState>,
    E2bAuth(caller): E2bAuth,
    ApiPath(id): ApiPath<String>,
) -> Result<impl IntoResponse, E2bApiError> {
    match app.control.delete_snapshot(&caller, &id).await {
        Ok(()) => return Ok(StatusCode::NO_CONTENT),
        Err(e) if e.kind == Kind::NotFound => {}
        Err(e) => return Err(e.into()),
    }
    app.control.delete_image(&caller, image_name(&app, &id)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// E2B's template build API: sandlot builds images itself.
pub async fn build() -> E2bApiError {
    E2bApiError::new(
        StatusCode::BAD_REQUEST,
        "templates are sandlot images and are not built through E2B's build API: build one with \
         `sandlot image build -t NAME DIR` (a Dockerfile) or pull one with `sandlot image pull`, then \
         create sandboxes with template=NAME",
    )
}
