-- Argo CD health of a Sluice job (HybridJob and VCJob share one state machine).
local status = obj.status or {}
for _, c in ipairs(status.conditions or {}) do
  if c.type == "Valid" and c.status == "False" then
    return {status = "Degraded", message = (c.reason or "Invalid") .. ": " .. (c.message or "")}
  end
end
for _, c in ipairs(status.conditions or {}) do
  if c.type == "Suspended" and c.status == "True" then
    return {status = "Suspended", message = "Suspended (spec.suspend)"}
  end
end
local health = {
  Pending = "Progressing",
  Inqueue = "Progressing",
  Running = "Healthy",
  Restarting = "Progressing",
  Completing = "Progressing",
  Completed = "Healthy",
  Aborting = "Progressing",
  Aborted = "Suspended",
  Terminating = "Progressing",
  Terminated = "Degraded",
  Failed = "Degraded",
}
local phase = status.phase
if phase == nil then
  return {status = "Progressing", message = "Waiting for the jobs operator"}
end
local message = phase
if status.message ~= nil and status.message ~= "" then
  message = phase .. ": " .. status.message
end
if status.preemption ~= nil and status.preemption.role == "WillEvict" then
  message = message .. " (to be evicted at " .. (status.preemption.deadline or "?") .. ")"
end
return {status = health[phase] or "Unknown", message = message}
