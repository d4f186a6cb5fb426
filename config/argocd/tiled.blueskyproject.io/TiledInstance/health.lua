-- Health of a TiledInstance from its kstatus conditions (Ready, Reconciling, Stalled) and its
-- upgrade: a failed upgrade was undone and leaves the instance on its previous version (Degraded).
local st = obj.status
if st == nil or st.observedGeneration == nil or st.observedGeneration ~= obj.metadata.generation then
  return {status = "Progressing", message = "Waiting for the operator to observe generation " .. tostring(obj.metadata.generation)}
end
local ready, reconciling
for _, c in ipairs(st.conditions or {}) do
  if c.type == "Stalled" and c.status == "True" then
    return {status = "Degraded", message = (c.reason or "Stalled") .. ": " .. (c.message or "")}
  end
  if c.type == "Ready" then ready = c end
  if c.type == "Reconciling" and c.status == "True" then reconciling = c end
end
if st.upgrade ~= nil and st.upgrade.phase == "Failed" then
  return {status = "Degraded", message = "UpgradeFailed: the upgrade to " .. tostring(st.upgrade.toImage) .. " failed and was undone; running " .. tostring(st.upgrade.fromImage)}
end
if ready ~= nil and ready.status == "True" then
  return {status = "Healthy", message = ready.message or ""}
end
local c = reconciling or ready
if c ~= nil then
  return {status = "Progressing", message = (c.reason or c.type) .. ": " .. (c.message or "")}
end
return {status = "Progressing", message = "Waiting for the operator to report Ready"}
