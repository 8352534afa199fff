// jinja_render.mjs: llama.cpp's Jinja engine (node-llama-cpp's native AddonJinjaRenderer, the
// engine of common/jinja/) as the oracle of ft's Jinja interpreter.
//
// usage: node tests/oracle/jinja_render.mjs JOB.json OUT.json
// JOB.json: [{"template": TEXT, "cases": [VARS, ...]}, ...], each VARS an object of the
// template's variables. OUT.json: per template, per case, {"text": RENDERED} or {"error": MSG}
// (a template that does not parse gives each of its cases that error).
import {getLlama} from "node-llama-cpp";
import fs from "fs";

const [job_path, out_path] = process.argv.slice(2);
const job = JSON.parse(fs.readFileSync(job_path, "utf8"));
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const out = job.map(t => {
    let renderer = null, parse_error = null;
    try {
        renderer = new llama._bindings.AddonJinjaRenderer(t.template);
    } catch (e) {
        parse_error = String(e.message || e);
    }
    return t.cases.map(c => {
        if (!renderer) return {error: parse_error};
        try {
            return {text: renderer.render(c)};
        } catch (e) {
            return {error: String(e.message || e)};
        }
    });
});
fs.writeFileSync(out_path, JSON.stringify(out));
