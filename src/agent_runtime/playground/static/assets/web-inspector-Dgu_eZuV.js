function e(){}export{e as defineWebInspector};
