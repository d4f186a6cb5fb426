-- Health of a TiledProfile from its Valid condition: an invalid profile stalls every cluster and
-- standalone instance that selects it.
local st = obj.status
if st == nil or st.observedGeneration == nil or st.observedGeneration ~= obj.metadata.generation then
  return {status = "Progressing", message = "Waiting for the operator to check generation " .. tostring(obj.metadata.generation)}
end
for _, c in ipairs(st.conditions or {}) do
  if c.type == "Valid" then
    if c.status == "True" then
      return {status = "Healthy", message = c.message or "Valid"}
    end
    return {status = "Degraded", message = (c.reason or "Invalid") .. ": " .. (c.message or "")}
  end
end
return {status = "Progressing", message = "Waiting for the operator to check the profile"}
