//! Network policy: compiled per sandbox with its tenant's exemptions, changed on a running sandbox,
//! and the admin's per-tenant exemptions from the always-denied ranges.

use std::sync::Arc;

use sandlot_api::{NetworkSpec, SandboxInfo, TenantNetwork};
use sandlot_engine::Policy;
use serde_json::json;

use crate::{Caller, Control, Error, Kind, Result};

/// Most exemptions one tenant may hold (each is checked on every connection its sandboxes open).
const MAX_EXEMPT: usize = 64;

fn admin_only(caller: &Caller) -> Result<()> {
    if caller.admin {
        return Ok(());
    }
    Err(Error::new(
        Kind::Forbidden,
        "only an admin key may read or change a tenant's network exemptions (see <state-dir>/admin.key)",
    ))
}

/// A sandbox's network policy and the tenant's exemptions it was compiled with.
pub(crate) struct CompiledPolicy {
    policy: Policy,
    exempt: Vec<String>,
}

impl Control {
    /// Compiles a sandbox's network spec for `tenant`, with the exemptions an admin gave the tenant.
    pub(crate) fn policy_for(&self, tenant: &str, spec: &NetworkSpec) -> Result<Policy> {
        Ok(self.compile_policy(tenant, spec)?.policy)
    }

    /// [`Self::policy_for`], keeping the exemptions it was compiled with.
    pub(crate) fn compile_policy(&self, tenant: &str, spec: &NetworkSpec) -> Result<CompiledPolicy> {
        let exempt = self.store.tenant_exemptions(tenant)?.unwrap_or_default();
        let policy = self.engine.compile_network(spec, &exempt).map_err(|e| Error::invalid(format!("network: {e}")))?;
        Ok(CompiledPolicy { policy, exempt })
    }

    /// `compiled`'s policy, or a new one if the tenant's exemptions changed since it was compiled.
    pub(crate) fn current_policy(&self, tenant: &str, spec: &NetworkSpec, compiled: CompiledPolicy) -> Result<Policy> {
        if self.store.tenant_exemptions(tenant)?.unwrap_or_default() == compiled.exempt {
            Ok(compiled.policy)
        } else {
            self.policy_for(tenant, spec)
        }
    }

    /// A new policy for the caller's sandbox `id`, effective for new connections and lookups.
    pub async fn set_network(&self, caller: &Caller, id: &str, mut spec: NetworkSpec) -> Result<SandboxInfo> {
        // Looked up before the lock too: a lock is made per id, and ids the caller does not own must not
        // make any.
        self.record(caller, id)?;
        // Under the sandbox's lock, with the record read again (it may have been deleted meanwhile) and
        // the tenant's exemptions as they are now: an admin's concurrent change to them is then either
        // seen here or applied after this, never undone by it.
        let _g = self.entries.lock(id).await;
        let rec = self.record(caller, id)?;
        if spec.public_ports.is_none() {
            spec.public_ports = rec.network.public_ports;
        }
        let policy = self.policy_for(&rec.tenant, &spec)?;
        // The running sandbox first: if that fails, nothing is stored and the old policy stays in force.
        if self.engine.get(id).is_some() {
            self.engine.set_network(id, policy).await?;
        }
        self.store.set_network(id, &spec)?;
        // Header values are secrets: the audit row names the headers only.
        self.audit(&rec.tenant, Some(id), "network.update", &json!(spec.info(0, 0)))?;
        let (bytes_out, bytes_in) = self.engine.get(id).map_or((0, 0), |sb| sb.net_bytes());
        let mut info = rec.info;
        info.network = spec.info(bytes_out, bytes_in);
        Ok(info)
    }

    /// Tenant `tenant`'s exemptions (admin only).
    pub fn tenant_network(&self, caller: &Caller, tenant: &str) -> Result<TenantNetwork> {
        admin_only(caller)?;
        let exempt = self.store.tenant_exemptions(tenant)?.ok_or_else(|| Error::not_found("tenant"))?;
        Ok(TenantNetwork { exempt })
    }

    /// Replaces tenant `tenant`'s exemptions (admin only); its running sandboxes apply them to new
    /// connections at once.
    pub async fn set_tenant_network(
        self: &Arc<Self>,
        caller: &Caller,
        tenant: &str,
        req: TenantNetwork,
    ) -> Result<TenantNetwork> {
        admin_only(caller)?;
        if req.exempt.len() > MAX_EXEMPT {
            return Err(Error::invalid(format!("exempt: at most {MAX_EXEMPT} ranges")));
        }
        // Validate before storing: a bad entry would make every later policy of the tenant fail to compile.
        self.engine
            .compile_network(&NetworkSpec::default(), &req.exempt)
            .map_err(|e| Error::invalid(format!("exempt: {e}")))?;
        if !self.store.set_tenant_exemptions(tenant, &req.exempt)? {
            return Err(Error::not_found("tenant"));
        }
        self.audit(&caller.tenant, None, "tenant.network", &json!({"tenant": tenant, "exempt": req.exempt}))?;
        // Every running sandbox is updated even if one fails (it may be ending right now), and even if
        // the caller goes away meanwhile (the update runs as a task of its own): a narrowed list must not
        // stay wide on some sandboxes.
        let this = Arc::clone(self);
        let tenant = tenant.to_string();
        let failed = tokio::spawn(async move { this.apply_to_running(&tenant).await })
            .await
            .map_err(|e| Error::internal(format!("updating sandboxes: {e}")))??;
        if !failed.is_empty() {
            return Err(Error::internal(format!(
                "the exemptions are stored, but these running sandboxes could not be updated: {}; \
                 they pick the exemptions up when resumed",
                failed.join(", ")
            )));
        }
        Ok(req)
    }

    /// Recompiles the policy of each of `tenant`'s running sandboxes with the stored exemptions;
    /// returns the ids it could not update.
    async fn apply_to_running(&self, tenant: &str) -> Result<Vec<String>> {
        let mut failed = Vec::new();
        for listed in self.store.list_sandboxes(tenant)? {
            let id = listed.info.id;
            // Under the sandbox's lock, with its policy re-read: a concurrent change is not undone.
            let _g = self.entries.lock(&id).await;
            let Some(rec) = self.store.get_sandbox(tenant, &id)? else { continue };
            let Some(running) = self.engine.get(&id) else { continue };
            if running.net().is_none() {
                continue; // no network link (deny): nothing to update until a change gives it one
            }
            let applied = match self.policy_for(tenant, &rec.network) {
                Ok(policy) => self.engine.set_network(&id, policy).await.map_err(|e| e.to_string()),
                Err(e) => Err(e.message),
            };
            if let Err(e) = applied {
                tracing::warn!(sandbox = %id, "applying tenant {tenant}'s network exemptions: {e}");
                failed.push(id);
            }
        }
        Ok(failed)
    }
}
