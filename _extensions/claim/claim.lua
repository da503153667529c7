-- {{< claim NAME >}}: the printed text of a claim from claims.json, with its provenance.
-- HTML: a link to the data file, titled with the file and its sha256, then a small link to the notebook that wrote
-- it. Other formats: the text in a span. A table claim (kind "table") returns its pipe table as blocks.
-- Quarto documents quarto.utils.resolve_path for files next to an extension's script; plain pandoc has
-- PANDOC_SCRIPT_FILE.
local function beside(file)
  if quarto and quarto.utils and quarto.utils.resolve_path then return quarto.utils.resolve_path(file) end
  local here = PANDOC_SCRIPT_FILE and PANDOC_SCRIPT_FILE:match("^(.*)[/\\]") or "."
  return here .. "/" .. file
end
local cf = dofile(beside("claims-file.lua"))
local data = nil

local function is_html()
  if quarto and quarto.doc and quarto.doc.is_format then return quarto.doc.is_format("html") end
  return FORMAT and FORMAT:match("html") ~= nil
end

-- Where readers find a data file: `offload-lab: data-url:` (e.g. a permalink base), else a path relative to the
-- page being written. Under Quarto that page is quarto.doc.output_file (a manuscript article paper/paper.qmd lands in
-- _manuscript/paper/index.html: quarto-cli src/resources/pandoc/datadir/init.lua outputFile()), and data paths are
-- relative to quarto.project.directory. Plain pandoc (the tests) has neither: one directory below the root, as
-- offload-lab's own build writes _output/<campaign>/paper.html two below it and links from there itself.
local function href(meta, path)
  local ol = meta and meta["offload-lab"]
  if ol and ol["data-url"] then return pandoc.utils.stringify(ol["data-url"]) .. path end
  if path:sub(1, 1) == "/" then return "file://" .. path end
  local doc, project = quarto and quarto.doc, quarto and quarto.project
  if doc and doc.output_file and project and project.directory then
    local page = doc.output_file
    if not pandoc.path.is_absolute(page) then page = pandoc.path.join({ project.directory, page }) end
    local target = pandoc.path.join({ project.directory, path })
    -- true: allow "../" steps (https://pandoc.org/lua-filters.html#pandoc.path.make_relative)
    return pandoc.path.make_relative(target, pandoc.path.directory(page), true)
  end
  return "../" .. path
end

local function claim(args, kwargs, meta)
  if data == nil then data = cf.load(meta) or false end
  local name = pandoc.utils.stringify(args[1] or "")
  local c = data and data.claims and data.claims[name]
  if not c then
    cf.warn("unknown claim " .. name)
    return cf.marker(name, "claim-unknown")
  end
  if c.status ~= "ok" then
    return cf.marker(name, "claim-absent")
  end
  local f = c.files[1]
  -- JSON null decodes to a userdata, not nil: take a notebook only when it is a string.
  local function str(v) if type(v) == "string" then return v end end
  local nb = str(c.notebook_output) or str(c.notebook)
  local title = name .. ": " .. f.path .. " sha256 " .. f.sha256
  if nb then title = title .. "; written by " .. nb end
  if c.kind == "table" then
    -- A table claim stands alone in its paragraph; Quarto replaces the paragraph with the blocks returned.
    local blocks = pandoc.read(c.text, "markdown").blocks
    if is_html() then
      blocks = blocks:walk({ Str = function(s)
        if s.text:match("%d") then
          return pandoc.Link(s.text, href(meta, f.path), title, pandoc.Attr("", { "claim" }, { { "data-claim", name } }))
        end
      end })
    end
    return blocks
  end
  local text = pandoc.Inlines(c.text)
  if is_html() then
    local link = pandoc.Link(text, href(meta, f.path), title, pandoc.Attr("", { "claim" }, { { "data-claim", name } }))
    if not nb then return link end
    -- The producing notebook: an empty link after the number, which paper.css draws as a small "nb"
    -- (a ::after mark, so that copied text holds the number alone).
    local mark = pandoc.Link({}, href(meta, nb), "notebook " .. nb,
      pandoc.Attr("", { "claim-nb" }, { { "aria-label", "notebook" } }))
    return pandoc.Inlines({ link, mark })
  end
  return pandoc.Span(text, pandoc.Attr("", { "claim" }, { { "data-claim", name }, { "title", title } }))
end

return { ["claim"] = claim }
