-- Argo CD health check for StreamingJob (sparkkafka.dev). Install it in argocd-cm as
-- resource.customizations.health.sparkkafka.dev_StreamingJob (docs/operator.md "Argo CD").
-- Healthy only when the operator has seen the current generation and Ready is True;
-- Degraded when the job is Failed or Invalid; Suspended while suspended; else Progressing.
local hs = {status = "Progressing", message = "Waiting for the operator"}
if obj.status == nil then
  return hs
end
local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and (observed == nil or observed < generation) then
  hs.message = "Waiting for the operator to observe generation " .. generation
  return hs
end
local phase = obj.status.phase or ""
local message = obj.status.message or ""
local function described(text)
  if text ~= "" then
    return phase .. ": " .. text
  end
  return phase
end
if phase == "Failed" or phase == "Invalid" then
  hs.status = "Degraded"
  hs.message = described(message)
  return hs
end
if phase == "Suspended" then
  hs.status = "Suspended"
  hs.message = described(message)
  return hs
end
if phase == "Completed" then
  hs.status = "Healthy"
  hs.message = described(message)
  return hs
end
local ready = false
local degraded = ""
if obj.status.conditions ~= nil then
  for _, condition in ipairs(obj.status.conditions) do
    if condition.type == "Ready" and condition.status == "True" then
      ready = true
    end
    if condition.type == "Degraded" and condition.status == "True" then
      degraded = condition.message or condition.reason or ""
    end
  end
end
if ready then
  hs.status = "Healthy"
  hs.message = described(message)
  return hs
end
-- automatic restarts, backoff, launches: the operator is working on it
if degraded ~= "" then
  hs.message = described(degraded)
else
  hs.message = described(message)
end
return hs
