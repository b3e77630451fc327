-- Argo CD health of a Sluice Pool (status written by the scheduler).
local hs = {status = "Progressing", message = "Waiting for the scheduler to report the pool"}
if obj.status == nil then
  return hs
end
if obj.status.observedGeneration ~= nil and obj.metadata.generation ~= nil
    and obj.status.observedGeneration < obj.metadata.generation then
  hs.message = "Waiting for the scheduler to observe the latest spec"
  return hs
end
for _, c in ipairs(obj.status.conditions or {}) do
  if c.status == "False" then
    return {status = "Degraded", message = (c.reason or c.type) .. ": " .. (c.message or "")}
  end
end
local nodes = obj.status.nodeCount or 0
return {status = "Healthy", message = nodes .. " node(s)"}
