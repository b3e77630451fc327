-- Argo CD health of a Sluice Queue: Open is healthy, Closed is suspended (takes no new jobs),
-- Closing drains, and a broken tree rule (Valid=False) is degraded.
local hs = {status = "Progressing", message = "Waiting for the scheduler to report the queue"}
if obj.status == nil then
  return hs
end
for _, c in ipairs(obj.status.conditions or {}) do
  if c.type == "Valid" and c.status == "False" then
    return {status = "Degraded", message = (c.reason or "Invalid") .. ": " .. (c.message or "")}
  end
end
local state = obj.status.state
if state == "Open" then
  return {status = "Healthy", message = "Open"}
elseif state == "Closed" then
  return {status = "Suspended", message = "Closed: accepts no new jobs"}
elseif state == "Closing" then
  return {status = "Progressing", message = "Closing: waiting for its running jobs"}
end
return hs
