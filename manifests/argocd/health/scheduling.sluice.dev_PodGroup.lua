-- Argo CD health of a Sluice PodGroup (a gang), from its phase and conditions.
local function condition(kind)
  for _, c in ipairs((obj.status or {}).conditions or {}) do
    if c.type == kind and c.status == "True" then
      return c
    end
  end
  return nil
end
local phase = (obj.status or {}).phase
if phase == nil then
  return {status = "Progressing", message = "Waiting for the scheduler"}
end
if phase == "Running" or phase == "Completed" then
  return {status = "Healthy", message = phase}
elseif phase == "Failed" then
  return {status = "Degraded", message = "Failed"}
elseif phase == "Unknown" then
  return {status = "Degraded", message = "Unknown: the gang can no longer be satisfied"}
elseif phase == "Inqueue" then
  return {status = "Progressing", message = "Inqueue: quota reserved, pods starting"}
end
-- Pending: waiting for quota or capacity, which only others' jobs finishing can free.
local why = condition("Unschedulable")
local message = "Pending: waiting for quota"
if why ~= nil then
  message = "Pending: " .. (why.reason or "") .. " " .. (why.message or "")
end
return {status = "Suspended", message = message}
